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
    metrics: tuple[str, ...] = ("accuracy",)   # what its evaluation reports with a built-in loss (eval_<name>)


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
                         "UNet", ("width", "levels", "dims"), loss="dice_cross_entropy", convolutional_2d=True,
                         metrics=("accuracy", "dice")),
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


# A loss that scores a float target: its evaluation has no class to be accurate about.
REGRESSION_LOSSES = ("mse",)


def evaluation_figures(model_name: str, loss: str | None, metrics: str | None, forward: str | None) -> list[str] | None:
    """The figures a run's evaluation reports (eval_loss, eval_<metric>) where they are known without running
    it: a built-in model with a built-in (or its default) loss, and neither train.metrics nor train.forward of
    the user's own. None: the user's code decides."""
    loss = loss or default_loss(model_name)
    if model_name not in MODELS or metrics or forward or (loss is not None and loss not in LOSSES):
        return None
    return ["eval_loss", *([] if loss in REGRESSION_LOSSES else [f"eval_{m}" for m in MODELS[model_name].metrics])]


def channels_last_applies(model_name: str, dims: int) -> bool:
    """Whether channels_last can apply: a 2D convolutional built-in, or a user's model (its own call)."""
    built_in = MODELS.get(model_name)
    return built_in is None or (built_in.convolutional_2d and dims == 2)
