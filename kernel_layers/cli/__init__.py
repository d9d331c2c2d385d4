"""The ``kernel-layers`` command line: :mod:`.entry` (the console script and its table of
commands), :mod:`.app` (LightningCLI), :mod:`.help_text` (what ``--help`` says),
:mod:`.commands` (``select-gamma``, ``plot``, ``export``), :mod:`.output` (what the
commands print), :mod:`.recipe_files` (the shipped recipes), :mod:`.allocator`
(host-memory tuning, applied by the entry point)."""
