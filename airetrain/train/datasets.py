"""The torch Datasets the trainer reads: staged .npy shards, image folders, synthetic data, user datasets.

The .npy shard layout is written by airetrain.stage.prepare (see there).
"""
from __future__ import annotations

import bisect
import json
import random
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from ..catalog import DATASETS
from ..dataset_trees import image_folder_classes
from ..run_config import Data
from .user_code import import_callable


def dataset_meta(data: Data, dataset_path: str | Path | None) -> dict | None:
    """The dataset's shape/classes (or vocab/seq_len) without loading it; None when unknown."""
    built_in = DATASETS.get(data.name)
    if built_in is not None and built_in.meta is not None:
        return built_in.meta
    if data.name == "image_folder":
        classes = image_folder_classes(dataset_path) if dataset_path else None
        return {"shape": list(data.shape), "classes": len(classes)} if classes else None
    if data.name == "synthetic":
        if data.vocab:
            return {"vocab": data.vocab, "seq_len": data.seq_len, "classes": data.vocab}
        return {"shape": list(data.shape), "classes": data.classes}
    return read_meta(dataset_path) if dataset_path and (Path(dataset_path) / "meta.json").is_file() else None


class NpyShards(Dataset):
    """One split of a shard directory, memory-mapped: nothing is read until it is indexed."""

    def __init__(self, root: str | Path, split: str):
        self.meta = read_meta(root)
        directory = Path(root) / split
        xs = sorted(directory.glob("x-*.npy"))
        if not xs:
            raise FileNotFoundError(f"no shards x-*.npy in {directory}")
        self.x = [np.load(p, mmap_mode="r") for p in xs]
        self.y = [np.load(p.with_name("y" + p.name[1:]), mmap_mode="r") for p in xs]
        self.ends = list(np.cumsum([len(a) for a in self.x]))

    def __len__(self) -> int:
        return int(self.ends[-1])

    def __getitem__(self, index: int):
        shard = bisect.bisect_right(self.ends, index)
        offset = index - (self.ends[shard - 1] if shard else 0)
        y = self.y[shard][offset]
        return torch.from_numpy(np.array(self.x[shard][offset])), torch.from_numpy(np.array(y)) if y.ndim else int(y)


def read_meta(root: str | Path) -> dict:
    return json.loads((Path(root) / "meta.json").read_text())


class Synthetic(Dataset):
    """Random inputs for benchmarks: images with labels, or token sequences (vocab given).

    A fixed pool of 1,024 random items (seeded) is indexed modulo its size, so any number of
    samples costs no memory and every rank sees the same data for the same index.
    """

    POOL = 1024

    def __init__(self, data: Data, split: str):
        self.samples = data.samples if split == "train" else max(data.samples // 10, 1)
        g = torch.Generator().manual_seed(0 if split == "train" else 1)
        if data.vocab:
            self.meta = {"vocab": data.vocab, "seq_len": data.seq_len, "classes": data.vocab}
            self.pool = torch.randint(data.vocab, (self.POOL, data.seq_len + 1), generator=g)
        else:
            self.meta = {"shape": list(data.shape), "classes": data.classes}
            self.pool = torch.randn(self.POOL, *data.shape, generator=g)
            self.labels = torch.randint(data.classes, (self.POOL,), generator=g)

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int):
        item = self.pool[index % self.POOL]
        if self.meta.get("vocab"):
            return item[:-1], item[1:]
        return item, int(self.labels[index % self.POOL])


class PerSampleSeeds(Dataset):
    """A user's dataset whose __getitem__ may draw random numbers (augmentations) from python's,
    numpy's or torch's global generator. Each sample's draws are seeded from (seed, epoch, index),
    so they replay exactly after a mid-epoch resume and do not depend on how many loader workers
    there are or which one loads the sample. The sampler passes keys: epoch * len + index."""

    def __init__(self, dataset: Dataset, seed: int):
        self.dataset, self.seed, self.meta = dataset, seed, dataset.meta

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: int):
        epoch, index = divmod(key, len(self.dataset))
        sample_seed = hash((self.seed, epoch, index)) & 0xFFFF_FFFF   # ints hash the same in every process
        # in the training process (no loader workers) the training's own random streams must not move
        saved = None if get_worker_info() else (random.getstate(), np.random.get_state(),
                                                  torch.default_generator.get_state())
        random.seed(sample_seed)
        np.random.seed(sample_seed)
        torch.default_generator.manual_seed(sample_seed)   # not torch.manual_seed: leave CUDA's alone
        try:
            return self.dataset[index]
        finally:
            if saved:
                random.setstate(saved[0])
                np.random.set_state(saved[1])
                torch.default_generator.set_state(saved[2])


def draws_random_numbers(data: Data) -> bool:
    """Whose samples may be augmented: seeded per sample (PerSampleSeeds), so a resume replays them."""
    return data.user or data.name == "image_folder"


def validation_set(data: Data, root: str | None) -> Dataset | None:
    """The validation split, where the dataset has one: val/ of an npy or shard layout, or what a user
    dataset's builder returns for "validation" (None: it has none)."""

    if data.user:
        return import_callable(data.name)("validation", root)
    if data.name in ("synthetic", "image_folder") or root is None:
        return None
    return NpyShards(root, "val") if any((Path(root) / "val").glob("x-*.npy")) else None


def build_datasets(data: Data, root: str | None) -> tuple[Dataset, Dataset | None, dict]:
    """(train, test, meta) for the `data:` config; root is the staged copy (None if nothing staged).

    A user dataset is `name: "package.module:function"`, called as function(split, root) and
    returning a torch Dataset with a `meta` dict (what the model builder gets: for the built-in
    models {"shape", "classes"} or {"vocab", "seq_len"}). test is None where there is no test
    split (the builder returns None for "test", or the shards have no test/): the run trains
    without evaluation.
    """

    name = data.name
    if name == "synthetic":
        train, test = Synthetic(data, "train"), Synthetic(data, "test")
    elif name == "image_folder":
        from .image_folder import image_folder
        train, test = image_folder(data, root)
    elif data.user:
        builder = import_callable(name)
        train, test = builder("train", root), builder("test", root)
    else:  # digits, shapes and npy: shards on the scratch root, staged
        train = NpyShards(root, "train")
        test = NpyShards(root, "test") if any((Path(root) / "test").glob("x-*.npy")) else None
    if not isinstance(getattr(train, "meta", None), dict):
        raise TypeError(f"dataset {name!r} must have a `meta` dict (for the built-in models: shape and classes, "
                        "or vocab and seq_len)")
    return train, test, train.meta
