"""Datasets written before staging: the embedded digits dataset as .npy shards on scratch.

Layout of a dataset directory (what `prepare` writes, and what `data.name: npy` reads):
    meta.json                      {"classes": 10, "shape": [1, 8, 8], "splits": {"train": n, "test": n}}
    train/x-00000.npy, y-00000.npy ... float32 inputs, int64 labels, one pair per shard
    test/x-00000.npy,  y-00000.npy
    files.json                     size and sha256 of every file (stage verifies against it)

Numpy and scikit-learn only: `airetrain prepare` runs where torch is not installed.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ..fsutil import fsync_dir, sha256_file, write_json_atomic
from .copy import DATASET_FILES


def write_shards(out: Path, split: str, x: np.ndarray, y: np.ndarray, shard_size: int) -> None:
    (out / split).mkdir(parents=True, exist_ok=True)
    for i, start in enumerate(range(0, len(x), shard_size)):
        np.save(out / split / f"x-{i:05d}.npy", np.ascontiguousarray(x[start:start + shard_size]))
        np.save(out / split / f"y-{i:05d}.npy", np.ascontiguousarray(y[start:start + shard_size]))


def write_file_list(root: Path) -> None:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != DATASET_FILES)
    listing = {str(p.relative_to(root)): {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in files}
    write_json_atomic(root / DATASET_FILES, {"files": listing})


def prepare_digits(dst: str | Path, test_fraction: float = 0.2, shard_size: int = 1000, seed: int = 0) -> Path:
    """Write scikit-learn's 1,797 handwritten digits (shipped with the package) as .npy shards.

    Built in a temporary directory and renamed into place, so a half-written dataset never
    appears under its real name.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    dst = Path(dst)
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]  # N x 1 x 8 x 8 in [0, 1]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y)

    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write_shards(tmp, "train", x_train, y_train, shard_size)
    write_shards(tmp, "test", x_test, y_test, shard_size)
    meta = {"name": "digits", "classes": 10, "shape": [1, 8, 8],
            "splits": {"train": len(x_train), "test": len(x_test)}}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    write_file_list(tmp)
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(dst)
    fsync_dir(dst.parent)
    return dst
