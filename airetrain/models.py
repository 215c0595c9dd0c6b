"""Built-in models, plain PyTorch."""
from __future__ import annotations

from torch import nn


def small_cnn(in_shape: list[int], classes: int, width: int = 32) -> nn.Module:
    """Two convolutions and a classifier: enough for >95% on 8x8 digits in seconds on a CPU."""
    channels, height, width_px = in_shape
    return nn.Sequential(
        nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * width * (height // 2) * (width_px // 2), 4 * width), nn.ReLU(),
        nn.Linear(4 * width, classes),
    )


MODELS = {"small_cnn": small_cnn}


def build(cfg: dict, in_shape: list[int], classes: int) -> nn.Module:
    return MODELS[cfg["name"]](in_shape, classes, width=cfg["width"])
