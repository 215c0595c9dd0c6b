"""A staged dataset's files by index, from a plain folder or read in place from its packed shards.

For your own dataset (data.name: "package.module:function", called as function(split, root)):

    from airetrain.train.files import DatasetFiles, Samples

    files = DatasetFiles(root, under="train/")   # files[i] -> (path, bytes), sorted by path
    samples = Samples(root, under="train/")      # samples[i] -> {"__key__": "train/cat/001", "jpg": b..., "json": b...}

Both work the same on a folder and on the shards `airetrain pack` wrote, so a dataset can be packed
without changing its code. A member of a shard is read with one pread at the offset the index
gives: no extraction, no scan of the tar, any order. Each loader worker opens its own file handles
(the ones inherited from the parent are closed in the child), at most MAX_OPEN at a time.

The random numbers your __getitem__ draws (augmentations) are seeded per sample by the trainer,
so a resumed run replays them exactly.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from ..dataset_trees import scan
from ..shards import read_members, sample_key, shard_index

MAX_OPEN = 128   # shard file handles per process (a per-process limit of 1,024 is common)


class DatasetFiles(Dataset):
    """Every file of a staged dataset (under a path prefix) as (relative path, bytes), sorted by path."""

    def __init__(self, root: str | Path, under: str = ""):
        self.root = Path(root)
        index = shard_index(self.root)
        self.packed = index is not None
        if self.packed:
            self.shard_names = [s["name"] for s in index["shards"]]
            paths, shards, offsets, sizes = read_members(self.root, self.shard_names, under)
        else:
            listing = sorted(rel for rel in scan(self.root) if rel.startswith(under))
            paths, shards = listing, np.zeros(len(listing), np.int32)
            offsets = sizes = np.zeros(len(listing), np.int64)
        order = np.argsort(np.array(paths, dtype=object), kind="stable")
        # numpy arrays, not lists of str: loader workers share them without copy-on-write of refcounts
        self.paths = np.array([p.encode() for p in paths], dtype=bytes)[order]
        self.shards, self.offsets, self.sizes = shards[order], offsets[order], sizes[order]
        self._pid, self._fds = os.getpid(), OrderedDict()

    def __len__(self) -> int:
        return len(self.paths)

    def path(self, index: int) -> str:
        return self.paths[index].decode()

    def read(self, index: int) -> bytes:
        if not self.packed:
            with open(self.root / self.path(index), "rb") as f:
                return f.read()
        size, offset = int(self.sizes[index]), int(self.offsets[index])
        data = os.pread(self._fd(int(self.shards[index])), size, offset)
        if len(data) != size:
            raise OSError(f"{self.root / self.shard_names[self.shards[index]]} is shorter than its index says "
                          f"(member {self.path(index)}): stage it again")
        return data

    def __getitem__(self, index: int) -> tuple[str, bytes]:
        return self.path(index), self.read(index)

    def _fd(self, shard: int) -> int:
        if self._pid != os.getpid():   # a loader worker: its own handles, not the parent's
            for fd in self._fds.values():
                os.close(fd)
            self._pid, self._fds = os.getpid(), OrderedDict()
        fd = self._fds.get(shard)
        if fd is None:
            fd = self._fds[shard] = os.open(self.root / self.shard_names[shard], os.O_RDONLY)
            if len(self._fds) > MAX_OPEN:
                os.close(self._fds.popitem(last=False)[1])
        else:
            self._fds.move_to_end(shard)
        return fd

    def __getstate__(self):   # a spawned worker opens its own handles
        return {**self.__dict__, "_fds": OrderedDict(), "_pid": None}

    def __del__(self):
        if getattr(self, "_pid", None) == os.getpid():
            for fd in self._fds.values():
                os.close(fd)


class Samples(Dataset):
    """WebDataset's samples: the files that share a key (path up to the first dot of the name) as one dict
    {"__key__": key, extension: bytes, ...}, in key order."""

    def __init__(self, root: str | Path, under: str = ""):
        self.files = DatasetFiles(root, under)
        keys = [sample_key(self.files.path(i)) for i in range(len(self.files))]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        self.members = np.array(order, np.int64)
        starts = [n for n, i in enumerate(order) if n == 0 or keys[i][0] != keys[order[n - 1]][0]]
        self.starts = np.array(starts + [len(order)], np.int64)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, index: int) -> dict:
        sample = {}
        for i in self.members[self.starts[index]:self.starts[index + 1]]:
            key, ext = sample_key(self.files.path(int(i)))
            sample["__key__"] = key
            sample[ext] = self.files.read(int(i))
        return sample
