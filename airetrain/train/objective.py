"""What the trainer optimizes and measures: the forward pass, the loss and the metrics of a batch.

The built-ins, unless the config names the user's own (train.forward, train.loss, train.metrics):
- forward: model(x) for an (x, y) batch, model(**batch) for a dict, else model(batch);
- loss: what the model returned if it is a loss (a scalar tensor, a dict with "loss", an object
  with .loss, as Hugging Face models return), else cross-entropy against the batch's target;
- metrics: accuracy, where the loss is cross-entropy (classification, per position or per pixel),
  and Dice for segmentation.
train.loss may also name a built-in: cross_entropy, dice_cross_entropy (the unet's default) or mse.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..builtin_models import default_loss
from ..run_config import Model, Train
from . import batches
from .user_code import import_callable


def _default_forward(model, batch):
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(batch[0])
    return model(batch)


def returned_loss(output):
    """The loss in what the model returned, or None when the output is not a loss."""
    if isinstance(output, torch.Tensor):
        return output if output.dim() == 0 else None
    if isinstance(output, dict):
        return output.get("loss")
    return getattr(output, "loss", None)


def logits_of(output):
    """The prediction in what the model returned: a tensor, or a dict's / an object's logits."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        return output.get("logits")
    return getattr(output, "logits", None)


def class_dim(logits: torch.Tensor, y: torch.Tensor) -> int | None:
    """Which dimension of logits holds the classes for integer targets y: the last (N x C, or
    N x T x V for sequences) or the second (N x C x H x W for segmentation); None if neither fits."""
    if y.is_floating_point() or logits.dim() != y.dim() + 1:
        return None
    if logits.shape[:-1] == y.shape:
        return -1
    if logits.shape[:1] + logits.shape[2:] == y.shape:
        return 1
    return None


def cross_entropy(output, batch) -> torch.Tensor:
    logits, y = logits_of(output), batches.target(batch)
    dim = class_dim(logits, y) if logits is not None and y is not None else None
    if dim is None:
        raise ValueError(
            "the built-in loss is cross-entropy: it needs integer targets and a model output with one more "
            f"dimension holding the classes (got output {_shape(logits)}, target {_shape(y)}); "
            "for another task set train.loss: 'package.module:function', called as function(output, batch)")
    if dim == -1:
        return F.cross_entropy(logits.flatten(0, -2).float(), y.flatten())
    return F.cross_entropy(logits.float(), y)


def _shape(t) -> str:
    if not isinstance(t, torch.Tensor):
        return "none" if t is None else type(t).__name__
    return ("x".join(map(str, t.shape)) or "scalar") + " " + str(t.dtype).removeprefix("torch.")


def _default_loss(output, batch) -> torch.Tensor:
    loss = returned_loss(output)
    return loss if loss is not None else cross_entropy(output, batch)


def _one_hot(y: torch.Tensor, classes: int) -> torch.Tensor:
    return F.one_hot(y, classes).movedim(-1, 1).float()


def dice_cross_entropy(output, batch) -> torch.Tensor:
    """Cross-entropy plus the soft Dice loss over the foreground classes (1 - mean Dice), the usual
    segmentation loss: cross-entropy learns every pixel, Dice keeps small structures from vanishing."""
    logits, y = logits_of(output).float(), batches.target(batch)
    probs, truth = logits.softmax(1), _one_hot(y, logits.shape[1])
    dims = [0, *range(2, logits.dim())]
    dice = (2 * (probs * truth).sum(dims) + 1) / (probs.sum(dims) + truth.sum(dims) + 1)
    return cross_entropy(output, batch) + 1 - dice[1:].mean()


def mse(output, batch) -> torch.Tensor:
    return F.mse_loss(logits_of(output).float(), batches.target(batch).float())


# the functions of builtin_models.LOSSES' names
LOSSES = {"cross_entropy": cross_entropy, "dice_cross_entropy": dice_cross_entropy, "mse": mse}


def dice_per_sample(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each sample's Dice of the predicted masks, the mean over the foreground classes; a class absent
    from both prediction and truth scores 1."""
    classes = logits.shape[1]
    pred, truth = _one_hot(logits.argmax(1), classes), _one_hot(y, classes)
    dims = list(range(2, logits.dim()))
    dice = (2 * (pred * truth).sum(dims) + 1) / (pred.sum(dims) + truth.sum(dims) + 1)
    return dice[:, 1:].mean(1)


class Objective:
    """The forward pass, loss and metrics of one run, from its train: config."""

    def __init__(self, train: Train, model: Model):
        self.user_forward = import_callable(train.forward) if train.forward else None
        loss = train.loss or default_loss(model.name)
        self.user_loss = (LOSSES[loss] if loss in LOSSES else import_callable(loss)) if loss else None
        self.built_in_loss = loss in LOSSES
        self.user_metrics = import_callable(train.metrics) if train.metrics else None
        # the user's metrics may say which way is better: fn.directions = {"mae": "min"}
        self.directions = dict(getattr(self.user_metrics, "directions", {}) or {})

    def forward(self, model, batch):
        return self.user_forward(model, batch) if self.user_forward else _default_forward(model, batch)

    def loss(self, output, batch) -> torch.Tensor:
        loss = self.user_loss(output, batch) if self.user_loss else _default_loss(output, batch)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise TypeError(f"the loss must be a scalar tensor, got {_shape(loss)}")
        return loss

    def metrics(self, output, batch) -> dict[str, tuple[float, float]]:
        """{name: (sum, count)} of one evaluation batch: the user's, else accuracy where it applies."""
        if self.user_metrics:
            return {name: (float(s), float(c)) for name, (s, c) in self.user_metrics(output, batch).items()}
        if (self.user_loss and not self.built_in_loss) or returned_loss(output) is not None:
            return {}
        logits, y = logits_of(output), batches.target(batch)
        dim = class_dim(logits, y) if logits is not None and y is not None else None
        if dim is None:
            return {}
        metrics = {"accuracy": (float((logits.argmax(dim) == y).sum()), float(y.numel()))}
        if dim == 1 and logits.dim() > 2:   # segmentation: N x C x H x W (x D)
            metrics["dice"] = (float(dice_per_sample(logits, y).sum()), float(len(y)))
        return metrics
