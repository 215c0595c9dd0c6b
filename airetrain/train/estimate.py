"""Per-GPU memory estimate behind `strategy: auto`: DDP if it fits the budget, else FSDP.

Parameters, gradients and optimizer state are counted exactly (on PyTorch's meta device, so no
memory is allocated); activations are measured with a one-batch probe: a forward pass on the
meta device that adds up every tensor autograd saves for backward. The plan step runs it
(`airetrain resolve`) and the plan decides from it (plan/strategy.py).
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from ..records import Plan
from ..run_config import Model, RunConfig
from .batches import to_device
from .datasets import build_datasets, dataset_meta
from .models import build_model
from .objective import Objective
from .parallel.fsdp_units import find_units
from .plan_check import failed, meta_device_limit, named_code

GB = 1e9
OPTIMIZER_BYTES_PER_PARAM = {"adamw": 8, "sgd": 4}  # fp32 moments (Adam: 2, SGD momentum: 1)


def optimizer_bytes(name: str) -> int:
    """Optimizer state per parameter; a user's optimizer is counted as Adam's (two fp32 moments), the
    most common and among the largest."""
    return OPTIMIZER_BYTES_PER_PARAM.get(name, OPTIMIZER_BYTES_PER_PARAM["adamw"])


def _measure(model, step, model_cfg: Model) -> tuple[int, int, int]:
    """(parameters, bytes autograd saves for backward while step() runs, FSDP units) of a meta model."""
    saved = 0

    def pack(t):
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    params = sum(p.numel() for p in model.parameters())
    return params, saved, len(find_units(model, model_cfg.fsdp_units).units)


@functools.lru_cache(maxsize=64)
def _probe(model_json: str, meta_json: str, per_device: int) -> tuple[int, int, int]:
    """(parameters, activation bytes of one fp32 forward, blocks) for a per-device batch."""
    model_cfg, meta = Model.from_dict(json.loads(model_json)), json.loads(meta_json)
    with torch.device("meta"):
        model = build_model(model_cfg, meta)
        if "vocab" in meta:
            x = torch.zeros(per_device, meta["seq_len"], dtype=torch.long)
        else:
            x = torch.empty(per_device, *meta["shape"])
    return _measure(model, lambda: model(x), model_cfg)


@functools.lru_cache(maxsize=64)
def _probe_user_batch(run_json: str, dataset_path: str | None, per_device: int) -> tuple[int, int, int]:
    """_probe for a user dataset: one real batch of it (read from scratch, before staging), moved to
    the meta device, through the run's forward pass and loss (train.forward, train.loss)."""
    run = RunConfig.from_dict(json.loads(run_json))
    train, _, meta = build_datasets(run.data, dataset_path)
    batch = to_device(next(iter(DataLoader(train, batch_size=per_device))), torch.device("meta"))
    objective = Objective(run.train, run.model)
    with torch.device("meta"):
        model = build_model(run.model, meta)
    return _measure(model, lambda: objective.loss(objective.forward(model, batch), batch), run.model)


def estimate(run: RunConfig, meta: dict | None, world: int, per_device: int,
             dataset_path: str | Path | None = None, run_name: str | None = None) -> dict:
    budget = run.memory_budget_gb
    if meta is None and not run.data.user:
        return {"decision": "ddp", "reason": "dataset shape unknown before staging: no estimate, DDP"}
    try:
        if run.data.user:   # its batches may be any structure: probe one, with the run's own loss
            params, activations, blocks = _probe_user_batch(json.dumps(run.to_dict(), sort_keys=True),
                                                            str(dataset_path) if dataset_path else None, per_device)
        else:
            params, activations, blocks = _probe(json.dumps(run.model.to_dict(), sort_keys=True),
                                                 json.dumps(meta, sort_keys=True), per_device)
    except Exception as e:
        if not meta_device_limit(e):   # the user's code failed: that fails the plan, never falls back
            code = named_code(run)
            key = next((k for k in ("train.forward", "train.loss", "model.name") if k in code), "model.name")
            raise failed(run_name or "<run>", key, code.get(key, run.model.name), e,
                         "raised in the memory estimate's forward pass on the meta device") from None
        return {"decision": "ddp", "reason": f"could not estimate ({type(e).__name__}: {e}): the meta device's "
                                             "limit, not an error of the code; DDP"}
    if run.precision != "fp32":
        activations //= 2  # autocast keeps most saved activations in 16 bits
    state = params * (4 + 4 + optimizer_bytes(run.optim.name))  # weights, grads, optimizer
    ddp = state + activations
    # FSDP shards the state; with activation checkpointing only block inputs stay, plus one block's
    fsdp = state / world + activations * 2 / max(blocks, 1)
    fits = budget is None or ddp <= budget * GB   # no budget: the GPU's memory is not known, DDP
    return {
        "parameters": params,
        "state_gb": round(state / GB, 3),
        "activations_gb": round(activations / GB, 3),
        "ddp_per_gpu_gb": round(ddp / GB, 3),
        "fsdp_per_gpu_gb": round(fsdp / GB, 3),
        "budget_gb": budget,
        # a checkpoint: fp32 weights and optimizer state (the durable root must hold checkpoint.keep + 1)
        "checkpoint_bytes": params * (4 + optimizer_bytes(run.optim.name)),
        "fsdp_units": blocks,   # what FSDP would shard one by one (parallel/fsdp_units.py)
        "decision": "ddp" if fits else "fsdp",
        "reason": (f"DDP needs {ddp / GB:.2f} GB per GPU; no memory budget (the site's GPU is not in the GPU "
                   "table: set memory_budget_gb), so DDP" if budget is None else
                   f"DDP needs {ddp / GB:.2f} GB per GPU, {'within' if fits else 'over'} the {budget:g} GB budget"
                   + ("" if fits else f"; FSDP with activation checkpointing needs about {fsdp / GB:.2f} GB")),
    }


def for_plan(plan: Plan) -> dict:
    """The estimate of a planned run, at its world size and per-device batch."""
    return estimate(plan.config, dataset_meta(plan.config.data, plan.dataset), plan.world_size,
                    plan.batch.per_device, plan.dataset, plan.run)
