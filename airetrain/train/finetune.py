"""Fine-tuning: the weights a run starts from (model.init_from) and the parameters it does not train
(model.freeze).

The source is a file (safetensors, a torch.save state dict, an airetrain checkpoint) or another run's
promoted weights. Its sha256 is part of the run's checkpoint fingerprint, so a run started from
other weights (the pretraining run retrained) never resumes from checkpoints of the old start. Its
weights are loaded once, into a fresh session; a resumed session takes its model from its own
checkpoint and keeps the first session's record of what was loaded.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..checkpoint import store
from ..checkpoint.weights import BEST_WEIGHTS, WEIGHTS
from ..fsutil import sha256_file
from ..roots import run_dir

log = logging.getLogger("airetrain.train")


def freeze(model: torch.nn.Module, prefixes: list[str]) -> dict:
    """Stop the gradients of the parameters whose names start with a prefix (before the optimizer is
    built, so they get no optimizer state); {trainable, frozen}: parameter counts."""
    names = [name for name, _ in model.named_parameters()]
    for prefix in prefixes:
        if not any(name.startswith(prefix) for name in names):
            raise ValueError(f"model.freeze: {prefix!r} matches no parameter; the model's parameters begin: "
                             f"{', '.join(names[:6])}{', ...' if len(names) > 6 else ''}")
    for name, p in model.named_parameters():
        if any(name.startswith(prefix) for prefix in prefixes):
            p.requires_grad_(False)
    counts = {"trainable": 0, "frozen": 0}
    for p in model.parameters():
        counts["trainable" if p.requires_grad else "frozen"] += p.numel()
    return counts


def source_path(init_from, scratch: Path) -> Path | None:
    """The file (or DCP directory) model.init_from names: a path, or another run's durable weights:
    best.safetensors where it has one (which: best, the default), else model.safetensors."""
    if init_from is None:
        return None
    if isinstance(init_from, str):
        return Path(init_from).expanduser().absolute()
    weights = run_dir(scratch, init_from["run"]) / "checkpoints"
    if init_from.get("which", "best") == "best" and (weights / BEST_WEIGHTS).exists():
        return weights / BEST_WEIGHTS
    return weights / WEIGHTS


def digest(path: Path) -> str:
    """The source's sha256 (a DCP directory: of its files' sha256s)."""
    if path.is_dir():
        return store.digest_of({p.name: sha256_file(p) for p in sorted(path.iterdir()) if p.is_file()})
    return sha256_file(path)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, a plain state dict, or an airetrain checkpoint's model part
    (a file, or a DCP directory, gathered); a DDP-saved state dict's `module.` prefix is dropped."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(path)
    elif path.is_dir():
        from ..checkpoint.weights import model_state

        state = model_state({"path": str(path), "kind": store.DCP})
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(state, dict) and isinstance(state.get("model"), dict) and "trainer" in state:
            state = state["model"]   # an airetrain checkpoint
    if not isinstance(state, dict):
        raise ValueError(f"model.init_from: {path} holds a {type(state).__name__}, not a state dict")
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if tensors and all(k.startswith("module.") for k in tensors):
        tensors = {k.removeprefix("module."): v for k, v in tensors.items()}
    return tensors


def match(expected: dict[str, torch.Size], loaded: dict[str, torch.Tensor], strict: bool, path: Path) -> dict:
    """{missing, unexpected}: the model's keys the source lacks, and its keys the model lacks. A shape
    mismatch is always an error, and with strict either list is one too."""
    for key in sorted(expected.keys() & loaded.keys()):
        if tuple(expected[key]) != tuple(loaded[key].shape):
            raise ValueError(f"model.init_from: {key} has shape {tuple(loaded[key].shape)} in {path}, "
                             f"{tuple(expected[key])} in the model")
    missing, unexpected = sorted(expected.keys() - loaded.keys()), sorted(loaded.keys() - expected.keys())
    if strict and (missing or unexpected):
        raise ValueError(f"model.init_from: {path} does not fit the model (model.init_strict: true): missing "
                         f"{', '.join(missing) or 'none'}; unexpected {', '.join(unexpected) or 'none'}; set "
                         "model.init_strict: false to load what fits")
    return {"missing": missing, "unexpected": unexpected}


def load(par, path: Path, sha256: str, strict: bool, d) -> dict:
    """Load the source into the wrapped model (DDP or FSDP; a collective): rank 0 reads and checks it,
    every rank gets its values. Missing keys keep their initial values. Returns train.json's init."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)

    # the model's full state, on rank 0 only: what a missing key keeps, and every key's shape
    current = get_model_state_dict(par.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    header, state = [None], {}
    if d.is_main:
        try:
            loaded = read_weights(path)
            header = [{"source": str(path), "sha256": sha256,
                       **match({k: v.shape for k, v in current.items()}, loaded, strict, path)}]
            state = {k: loaded[k].to(v.dtype) if k in loaded else v for k, v in current.items()}
        except (ValueError, OSError, RuntimeError) as e:
            header = [{"error": f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)}]
    dist.broadcast_object_list(header, src=0)
    if "error" in header[0]:
        raise ValueError(header[0]["error"])
    set_model_state_dict(par.model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    init = header[0]
    log.info("initialised from %s (sha256 %s…)%s%s", path, sha256[:12],
             f"; missing, kept as built: {', '.join(init['missing'])}" if init["missing"] else "",
             f"; unexpected, ignored: {', '.join(init['unexpected'])}" if init["unexpected"] else "")
    return init
