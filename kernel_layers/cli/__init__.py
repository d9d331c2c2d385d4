"""The ``kernel-layers`` command line: :mod:`.entry` (the console script),
:mod:`.app` (LightningCLI and the commands), :mod:`.recipe_files` (the shipped
recipes), :mod:`.allocator` (host-memory tuning applied by the entry point)."""
