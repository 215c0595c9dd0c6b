"""The built-in models and losses, in one table each: what the config's model.name and train.loss
accept (the schema's enums, checked by a test), the loss each model trains with by default, what the
plan refuses for each without building it, and the reference in docs/configuration.md.

The builders themselves are in airetrain.train.models (torch); this table holds no torch, so the plan
reads it. Adding a built-in model: its builder there, its row here, its name in the schema's enum.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltInModel:
    about: str
    builder: str                  # the class or function of airetrain.train.models that builds it
    keys: tuple[str, ...]         # the model: keys it reads besides name
    loss: str | None = None       # where train.loss is null: a LOSSES name, or None: the trainer's default
                                  # (a loss the model returns, else cross_entropy)
    attention: bool = False       # transformer blocks: model.heads must divide model.width
    convolutional_2d: bool = False   # 2D convolutions (with model.dims: 2): channels_last applies


MODELS = {
    "small_cnn": BuiltInModel("two convolutions and a classifier: the demo, >95 % on digits in seconds on a CPU",
                              "small_cnn", ("width", "dropout"), convolutional_2d=True),
    "resnet18": BuiltInModel("ResNet-18's layout (2-2-2-2 basic blocks) with a 3x3 stem for small images",
                             "ResNet18", ("width",), convolutional_2d=True),
    "vit": BuiltInModel("a vision transformer: patches, a class token, pre-norm blocks",
                        "ViT", ("width", "depth", "heads", "patch_size"), attention=True),
    "gpt": BuiltInModel("a GPT-style decoder (causal blocks, tied output head) for next-token data: the FSDP showcase",
                        "GPT", ("width", "depth", "heads"), attention=True),
    "unet": BuiltInModel("a U-Net for segmentation, 2D or 3D (model.dims), GroupNorm",
                         "UNet", ("width", "levels", "dims"), loss="dice_cross_entropy", convolutional_2d=True),
}

LOSSES = {
    "cross_entropy": "classification, over the class dimension (also per pixel or token)",
    "dice_cross_entropy": "segmentation: soft Dice over the foreground classes plus cross-entropy",
    "mse": "regression: mean squared error of the output and a float target",
}


def default_loss(model_name: str) -> str | None:
    """The loss a model trains with where train.loss is null: a LOSSES name, or None: the trainer's
    default, decided per batch (a loss the model returns, else cross_entropy), as for a user's model."""
    built_in = MODELS.get(model_name)
    return built_in.loss if built_in else None


def channels_last_applies(model_name: str, dims: int) -> bool:
    """Whether channels_last can apply: a 2D convolutional built-in, or a user's model (its own call)."""
    built_in = MODELS.get(model_name)
    return built_in is None or (built_in.convolutional_2d and dims == 2)
