"""Wrap a model for data-parallel training: DDP, or FSDP2 (fully_shard) per block.

One interface for the loop: `wrapped(x)`, `grad_sync(last_micro_step)` for gradient
accumulation, and full (unsharded) state dicts for checkpoints, gathered the same way for both.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
    set_model_state_dict, set_optimizer_state_dict)
from torch.nn.parallel import DistributedDataParallel as DDP

from ...records import Plan
from .fsdp_units import find_units

FULL = StateDictOptions(full_state_dict=True)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


class Parallel:
    def __init__(self, model: nn.Module, plan: Plan, device: torch.device):
        self.strategy = plan.strategy
        cfg = plan.config
        # the format the training step gives 4-D inputs: the model's own, set before wrapping
        self.memory_format = torch.channels_last if cfg.channels_last else None
        if self.memory_format is not None:
            model.to(memory_format=self.memory_format)
        self.model = model
        self.units = find_units(model, cfg.model.fsdp_units)
        units = [u for u in self.units.units if any(p.requires_grad for p in u.module.parameters())]
        if plan.activation_checkpointing:  # keep each unit's input, recompute the rest in backward
            for u in units:
                setattr(u.parent, u.name, checkpoint_wrapper(u.module))
        if self.strategy == "fsdp":
            from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

            dtype = DTYPES[plan.precision]
            kwargs = {"mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
                      if dtype else MixedPrecisionPolicy()}
            if cfg.fsdp_cpu_offload:
                kwargs["offload_policy"] = CPUOffloadPolicy()
            for u in units:   # one all-gather per unit, overlapped with compute
                fully_shard(getattr(u.parent, u.name), **kwargs)
            fully_shard(model, **kwargs)
            self.wrapped = model
        else:
            # gradients live in the all-reduce buckets: one copy fewer per step
            self.wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                               gradient_as_bucket_view=True, bucket_cap_mb=cfg.ddp_bucket_mb)
        if cfg.compile and device.type == "cuda":
            self.wrapped = torch.compile(self.wrapped)

    def settle_buckets(self, objective, batch, precision: str) -> None:
        """One thrown-away forward and backward (a collective), so that the first real step uses
        DDP's rebuilt gradient buckets in every session.

        DDP reduces its first step's gradients in one bucket in parameter order, and every later
        step's in buckets rebuilt in the order backward produced them. A resumed session's first
        step would thus sum each gradient across ranks in another order than the uninterrupted run
        did at that step: with two ranks that is the same sum, with more it differs in the last bits
        (measured: 6 ranks, 2e-7 in the weights). RNG states and buffers (BatchNorm's statistics)
        are put back, and the gradients dropped."""
        if self.strategy == "fsdp" or not isinstance(self.wrapped, DDP):
            return
        from ..step import autocast

        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        buffers = {name: b.detach().clone() for name, b in self.model.named_buffers()}
        with autocast(next(self.model.parameters()).device, precision, self.autocast_needed()):
            loss = objective.loss(objective.forward(self.wrapped, batch), batch)
        loss.backward()
        self.model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for name, b in self.model.named_buffers():
                b.copy_(buffers[name])
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)

    def __call__(self, *args, **kwargs):
        return self.wrapped(*args, **kwargs)

    @contextmanager
    def grad_sync(self, sync: bool):
        """Reduce gradients only on the last micro-step of an accumulation."""
        if self.strategy == "fsdp":
            self.model.set_requires_gradient_sync(sync)
            yield
        else:
            ddp = self.wrapped if isinstance(self.wrapped, DDP) else self.wrapped._orig_mod
            with nullcontext() if sync else ddp.no_sync():
                yield

    def autocast_needed(self) -> bool:
        """FSDP's MixedPrecisionPolicy already computes in low precision; DDP uses autocast."""
        return self.strategy != "fsdp"

    def full_state(self, optimizer) -> tuple[dict, dict]:
        """(model, optimizer) state dicts, unsharded, with plain parameter names. A collective."""
        return get_model_state_dict(self.model, options=FULL), \
            get_optimizer_state_dict(self.model, optimizer, options=FULL)

    def load_full_state(self, optimizer, model_state: dict, optim_state: dict) -> None:
        """Rank 0 holds the full state (it alone may see the file: a node-local fast root);
        the others pass empty dicts and receive it. Two separate calls: one combined call hangs."""
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(self.model, model_state, options=options)
        set_optimizer_state_dict(self.model, optimizer, optim_state, options=options)
