"""Shipped LightningCLI recipes (YAML): ``kernel-layers fit --config NAME``.

``kernel-layers recipes`` lists them; :func:`kernel_layers.cli.recipe_files.recipe_path`
resolves a bare name to the installed file.
"""
