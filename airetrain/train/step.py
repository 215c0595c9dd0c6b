"""One optimizer step: forward and backward over the step's micro-batches, then the optimizer."""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from . import batches as batch_tools


def autocast(device: torch.device, precision: str, enabled: bool = True):
    if precision in ("bf16", "fp16") and enabled:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    return nullcontext()


def grad_norm(parameters, max_norm: float | None) -> torch.Tensor:
    """The total L2 norm of the gradients, before clipping (what clip_grad_norm_ returns), with the
    gradients clipped to max_norm where it is set. Under FSDP each rank holds shards of the gradients
    (DTensors): the norm is reduced over the shards, so every rank clips by the same global norm."""
    with_grads = [p for p in parameters if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in with_grads])
    if max_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(with_grads, max_norm, norm)   # scales each p.grad
    return (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).detach()


def train_step(s, batches, norm_wanted: bool = False,
               timer=nullcontext) -> tuple[torch.Tensor, float, torch.Tensor | None]:
    """Run the step's micro-batches (batch.grad_accum of them) from `batches`, then one optimizer step,
    for the session s (train/session.py); its objective gives the forward pass and the loss.

    Returns the step's loss (the mean over its micro-batches, detached and left on the device:
    reading it would wait for the GPU), the seconds spent waiting for the data loader, and the
    gradients' total norm before clipping: where optim.grad_clip_norm clips, or norm_wanted (a
    step that is logged), else None. Gradients are reduced across ranks once, in the last
    micro-batch's backward pass, and unscaled (fp16) before they are measured. timer: a context around
    each forward pass and its loss, this rank's own compute (train/stragglers.py).
    """
    par, device, precision, accum = s.par, s.d.device, s.plan.precision, s.plan.batch.grad_accum
    loss_sum = torch.zeros((), device=device)
    wait_s = 0.0
    for micro in range(accum):
        t0 = time.perf_counter()
        batch = next(batches)
        wait_s += time.perf_counter() - t0
        batch = batch_tools.to_device(batch, device, par.memory_format)
        with par.grad_sync(micro == accum - 1):
            with timer(), autocast(device, precision, par.autocast_needed()):
                loss = s.objective.loss(s.objective.forward(par.wrapped, batch), batch) / accum
            s.scaler.scale(loss).backward()
        loss_sum += loss.detach()
    clip = s.plan.config.optim.grad_clip_norm
    norm = None
    if clip is not None or norm_wanted:
        s.scaler.unscale_(s.optimizer)
        norm = grad_norm(s.par.wrapped.parameters(), clip)
    s.scaler.step(s.optimizer)
    s.scaler.update()
    s.scheduler.step()
    s.optimizer.zero_grad(set_to_none=True)
    return loss_sum, wait_s, norm
