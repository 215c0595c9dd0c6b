"""Batches of any shape the user's Dataset returns: tuples, lists, dicts, dataclass-like objects.

The default DataLoader collates them into the same structure with tensors inside; these helpers
walk that structure without knowing it.
"""
from __future__ import annotations

import dataclasses

import torch


def _map(fn, batch):
    """batch with fn applied to every tensor in it (containers rebuilt, other leaves kept)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return type(batch)({k: _map(fn, v) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):   # a namedtuple
        return type(batch)(*(_map(fn, v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_map(fn, v) for v in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(batch, **{f.name: _map(fn, getattr(batch, f.name))
                                            for f in dataclasses.fields(batch) if f.init})
    return batch


def to_device(batch, device: torch.device, memory_format: torch.memory_format | None = None):
    """Every tensor of batch on device; non-blocking (the loader pins memory on CUDA). With a memory
    format (channels_last), the batch's 4-D floating-point tensors (images) take it."""
    def move(t: torch.Tensor) -> torch.Tensor:
        t = t.to(device, non_blocking=True)
        return t.contiguous(memory_format=memory_format) if memory_format and t.dim() == 4 \
            and t.is_floating_point() else t
    return _map(move, batch)


def first_rows(batch, rows: int):
    """The first `rows` samples of a collated batch (0: an empty batch of the same structure)."""
    return _map(lambda t: t[:rows] if t.dim() else t, batch)


def size(batch) -> int:
    """Samples in the batch: the leading dimension of its first tensor."""
    found = []
    _map(lambda t: found.append(t) or t, batch)
    tensors = [t for t in found if t.dim()]
    return len(tensors[0]) if tensors else 0


def target(batch):
    """The target of a batch for the built-in losses: y of (x, y), or a dict's labels/target/y."""
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        return batch[1]
    if isinstance(batch, dict):
        for key in ("labels", "label", "target", "targets", "y"):
            if key in batch:
                return batch[key]
    return None


def first_batch(dataset, size: int, device: torch.device):
    """The dataset's first `size` samples as one batch on device (for probes, not for training)."""
    from torch.utils.data import DataLoader

    return to_device(next(iter(DataLoader(dataset, batch_size=size))), device)
