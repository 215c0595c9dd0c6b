"""airetrain: PyTorch training from a config file to safe checkpoints and an efficiency report."""

__version__ = "0.1.0"
