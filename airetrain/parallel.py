"""Wrap a model for data-parallel training: DDP, or FSDP2 (fully_shard) per block.

One interface for the loop: `wrapped(x)`, `grad_sync(last_micro_step)` for gradient
accumulation, and full (unsharded) state dicts for checkpoints, gathered the same way for both.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
    set_model_state_dict, set_optimizer_state_dict)
from torch.nn.parallel import DistributedDataParallel as DDP

FULL = StateDictOptions(full_state_dict=True)


class Parallel:
    def __init__(self, model: nn.Module, strategy: str, device: torch.device, precision: str):
        self.strategy = strategy
        self.model = model
        if strategy == "fsdp":
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
                if precision == "bf16" else MixedPrecisionPolicy()
            for block in model.children():   # one all-gather per block, overlapped with compute
                if any(p.requires_grad for p in block.parameters()):
                    fully_shard(block, mp_policy=policy)
            fully_shard(model, mp_policy=policy)
            self.wrapped = model
        else:
            self.wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    def __call__(self, x):
        return self.wrapped(x)

    @contextmanager
    def grad_sync(self, sync: bool):
        """Reduce gradients only on the last micro-step of an accumulation."""
        if self.strategy == "fsdp":
            self.model.set_requires_gradient_sync(sync)
            yield
        else:
            with nullcontext() if sync else self.wrapped.no_sync():
                yield

    def autocast_needed(self) -> bool:
        """FSDP's MixedPrecisionPolicy already computes in bf16; DDP uses autocast."""
        return self.strategy != "fsdp"

    def full_state(self, optimizer) -> tuple[dict, dict]:
        """(model, optimizer) state dicts, unsharded, with plain parameter names. A collective."""
        return get_model_state_dict(self.model, options=FULL), \
            get_optimizer_state_dict(self.model, optimizer, options=FULL)

    def load_full_state(self, optimizer, model_state: dict, optim_state: dict) -> None:
        """Every rank holds the full state (each loaded the file); separate calls, no broadcast."""
        set_model_state_dict(self.model, model_state, options=FULL)
        set_optimizer_state_dict(self.model, optimizer, optim_state, options=FULL)
