"""The optimizer and its learning-rate schedule, from the `optim:` config."""
from __future__ import annotations

import math

import torch

from ..run_config import Optim
from .user_code import import_callable


def fused_default(device_type: str) -> bool | None:
    """optim.fused when the config leaves it null: the fused kernel where it was measured to be faster
    (on CPU: the optimizer's step and the trainer's samples/s, benchmarks/README.md); elsewhere None,
    torch's own choice (foreach on CUDA), until benchmarks/gpu_check.sh has measured it."""
    return True if device_type == "cpu" else None


def user_code(name: str) -> bool:
    """Whether optim.name or optim.schedule names the user's own function ('pkg.mod:fn')."""
    return ":" in name


def param_groups(model: torch.nn.Module, optim: Optim) -> list[dict] | object:
    """The model's parameters; with optim.no_decay_norm_bias, in two groups: the weight matrices and
    kernels with weight decay, the biases and normalisation weights (1-D) without, as is usual for
    transformers and convolutional networks alike."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not optim.no_decay_norm_bias:
        return params
    return [{"params": [p for p in params if p.ndim >= 2]},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def make_optimizer(optim: Optim, model: torch.nn.Module, device_type: str = "cpu") -> torch.optim.Optimizer:
    """The built-in optimizer (adamw, sgd), or the user's: optim.name 'pkg.mod:fn', called as
    fn(model, optim_config) with the optim section as a plain dict, returning a torch Optimizer."""
    if user_code(optim.name):

        optimizer = import_callable(optim.name)(model, optim.to_dict())
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optim.name {optim.name} returned {type(optimizer).__name__}, "
                            "not a torch.optim.Optimizer")
        return optimizer
    choice = fused_default(device_type) if optim.fused is None else optim.fused
    fused = {} if choice is None else {"fused": choice}
    params = param_groups(model, optim)
    if optim.name == "sgd":
        return torch.optim.SGD(params, lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay,
                               **fused)
    return torch.optim.AdamW(params, lr=optim.lr, weight_decay=optim.weight_decay, **fused)


def lr_factor(step: int, warmup: int, total_steps: int, schedule, optim_config: dict | None = None) -> float:
    """The learning rate of optimizer step `step` (from 0) as a fraction of optim.lr.

    A linear warm-up over `warmup` steps reaches 1 at step warmup - 1; then the rate stays
    (constant), falls along a half cosine (cosine) or a straight line (linear) to 0 at total_steps,
    or is what the user's schedule returns: schedule(step, total_steps, optim_config)."""
    if step < warmup:
        return (step + 1) / warmup
    if callable(schedule):
        return float(schedule(step, total_steps, optim_config))
    done = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * done))
    if schedule == "linear":
        return 1.0 - done
    return 1.0


def make_scheduler(optim: Optim, optimizer, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    # a plain function: LambdaLR keeps no state of it in the checkpoint, only the step count, so a
    # user's schedule resumes exactly where it is a function of its arguments alone
    schedule, config = optim.schedule, optim.to_dict()
    if user_code(schedule):
        schedule = import_callable(schedule)

    def factor(step: int) -> float:
        return lr_factor(step, optim.warmup_steps, total_steps, schedule, config)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
