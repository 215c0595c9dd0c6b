"""The trained weights on their own: model.safetensors beside the durable checkpoint.

A checkpoint holds the whole training state (optimizer, RNG, schedule) in torch's pickle format,
and an FSDP one is sharded across files. Inference code, the Hugging Face libraries and a
colleague's script want the model's weights alone, unsharded, under the module's own names, in a
format that runs no code when it is read: safetensors. The promote step writes them from the
checkpoint it has just verified.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

import torch

from . import store
from ..fsutil import room_for, write_bytes_atomic
from .promote import DURABLE_ROOT

WEIGHTS = "model.safetensors"
BEST_WEIGHTS = "best.safetensors"


def model_state(entry: dict) -> dict[str, torch.Tensor]:
    """The model's full state dict from a verified durable checkpoint (entry: its manifest entry
    with its path); an FSDP (DCP) one is gathered from its shards into whole tensors."""
    path = Path(entry["path"])
    if store.kind(entry) == store.DCP:
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        buffer = io.BytesIO()
        dcp_to_torch_save(path, buffer)
        buffer.seek(0)
        state = torch.load(buffer, map_location="cpu", weights_only=True)
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    return {name: value for name, value in state["model"].items() if isinstance(value, torch.Tensor)}


def _unshared(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors stores each tensor once, and refuses two names for one storage (tied weights, as a
    language model's embedding and output layer): the second name gets a copy, which loads the same."""
    seen, out = set(), {}
    for name, tensor in tensors.items():
        tensor = tensor.detach().contiguous()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        out[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    return out


def write_weights(entry: dict, name: str = WEIGHTS) -> dict:
    """Write the checkpoint's model weights as `name` beside it (a temporary file, fsynced, renamed);
    returns {file, path, sha256, size, step}."""
    from safetensors.torch import save

    data = save(_unshared(model_state(entry)), metadata={"step": str(entry["step"]), "epoch": str(entry["epoch"])})
    target = Path(entry["path"]).parent / name
    with room_for(target, len(data), DURABLE_ROOT):
        write_bytes_atomic(target, data)
    return {"file": name, "path": str(target), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
            "step": entry["step"]}
