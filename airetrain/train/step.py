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


def train_step(s, batches) -> tuple[torch.Tensor, float]:
    """Run the step's micro-batches (batch.grad_accum of them) from `batches`, then one optimizer step,
    for the session s (train/session.py); its objective gives the forward pass and the loss.

    Returns the step's loss (the mean over its micro-batches, detached and left on the device:
    reading it would wait for the GPU) and the seconds spent waiting for the data loader.
    Gradients are reduced across ranks once, in the last micro-batch's backward pass.
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
            with autocast(device, precision, par.autocast_needed()):
                loss = s.objective.loss(s.objective.forward(par.wrapped, batch), batch) / accum
            s.scaler.scale(loss).backward()
        loss_sum += loss.detach()
    s.scaler.step(s.optimizer)
    s.scaler.update()
    s.scheduler.step()
    s.optimizer.zero_grad(set_to_none=True)
    return loss_sum, wait_s
