"""Training: the LightningModule, read-out heads, backbones and the command line.

Needs Lightning and torchmetrics (imported with the submodules, not with
:mod:`kernel_layers`): :mod:`~kernel_layers.training.module` (``KernelClassifier``),
:mod:`~kernel_layers.training.regression` (``KernelRegressor``),
:mod:`~kernel_layers.training.heads` (``RidgeHead``, torch only),
:mod:`~kernel_layers.training.backbones`, :mod:`~kernel_layers.training.predictor`
(``Predictor``: the trained model as one module), :mod:`~kernel_layers.training.export`
(``export_onnx``), :mod:`~kernel_layers.cli.app`. The
callbacks live in :mod:`kernel_layers.callbacks`.
"""
