"""The prepare step: the built-in datasets (airetrain.catalog) written to scratch before staging.

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

from ..catalog import DATASETS
from ..fsutil import fsync_dir, sha256_file, write_json_atomic
from ..dataset_trees import DATASET_FILES


def write_shards(out: Path, split: str, x: np.ndarray, y: np.ndarray, shard_size: int) -> None:
    (out / split).mkdir(parents=True, exist_ok=True)
    for i, start in enumerate(range(0, len(x), shard_size)):
        np.save(out / split / f"x-{i:05d}.npy", np.ascontiguousarray(x[start:start + shard_size]))
        np.save(out / split / f"y-{i:05d}.npy", np.ascontiguousarray(y[start:start + shard_size]))


def write_file_list(root: Path) -> None:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != DATASET_FILES)
    listing = {str(p.relative_to(root)): {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in files}
    write_json_atomic(root / DATASET_FILES, {"files": listing})


def _into_place(dst: str | Path, write) -> Path:
    """write(tmp) builds a dataset in a temporary directory, which is then renamed to dst, so a
    half-written dataset never appears under its real name."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(dst)
    fsync_dir(dst.parent)
    return dst


def _write_dataset(dst: str | Path, splits: dict[str, tuple[np.ndarray, np.ndarray]], meta: dict,
                   shard_size: int) -> Path:
    """Shards, meta.json and files.json, put in place whole."""
    def write(tmp: Path) -> None:
        for split, (x, y) in splits.items():
            write_shards(tmp, split, x, y, shard_size)
        splits_meta = {**meta, "splits": {split: len(x) for split, (x, _) in splits.items()}}
        (tmp / "meta.json").write_text(json.dumps(splits_meta, indent=2) + "\n")
        write_file_list(tmp)
    return _into_place(dst, write)


def prepare_digits(dst: str | Path, test_fraction: float = 0.2, shard_size: int = 1000, seed: int = 0) -> Path:
    """Write scikit-learn's 1,797 handwritten digits (shipped with the package) as .npy shards."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]  # N x 1 x 8 x 8 in [0, 1]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return _write_dataset(dst, {"train": (x_train, y_train), "test": (x_test, y_test)},
                          {"name": "digits", "classes": 10, "shape": [1, 8, 8]}, shard_size)


SHAPES = {2: 32, 3: 16}   # image side (2D) or volume side (3D), voxels


def _shapes(count: int, dims: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Images (or volumes) of discs (class 1) and squares (class 2), each a little brighter than the
    noise around it, with their masks; the shape drawn last wins where two overlap."""
    side = SHAPES[dims]
    grid = np.stack(np.meshgrid(*[np.arange(side)] * dims, indexing="ij")).astype(np.float32)
    x = rng.normal(0.0, 0.15, (count, 1, *[side] * dims)).astype(np.float32)
    y = np.zeros((count, *[side] * dims), dtype=np.int64)
    for i in range(count):
        for _ in range(rng.integers(1, 4)):
            cls = int(rng.integers(1, 3))
            centre = rng.uniform(side * 0.2, side * 0.8, dims).reshape(dims, *[1] * dims)
            radius = rng.uniform(side * 0.1, side * 0.25)
            offset = np.abs(grid - centre)
            inside = (np.sqrt((offset ** 2).sum(0)) <= radius) if cls == 1 else (offset.max(0) <= radius * 0.8)
            x[i, 0][inside] = 0.6 + 0.3 * (cls - 1) + rng.normal(0.0, 0.15, inside.sum())
            y[i][inside] = cls
    return x, y


def prepare_shapes(dst: str | Path, dims: int = 2, train: int = 512, test: int = 128, shard_size: int = 256,
                   seed: int = 0) -> Path:
    """A segmentation dataset needing no download: discs and squares (2D) or balls and cubes (3D)
    with their masks, as .npy shards: x N x 1 x side^dims float32, y N x side^dims int64 classes."""
    rng = np.random.default_rng(seed)
    splits = {"train": _shapes(train, dims, rng), "test": _shapes(test, dims, rng)}
    meta = {"name": "shapes" if dims == 2 else "shapes3d", "classes": 3, "shape": [1, *[SHAPES[dims]] * dims],
            "task": "segmentation"}
    return _write_dataset(dst, splits, meta, shard_size)


def prepare_digits_images(dst: str | Path, test_fraction: float = 0.2, seed: int = 0) -> Path:
    """The digits as an image folder, train/<digit>/<n>.png and test/<digit>/<n>.png (8 x 8 grey): the
    demo's data in the layout of an ImageNet-style tree, for image_folder and airetrain pack."""
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = np.round(digits.images * (255 / 16)).astype(np.uint8)
    x_train, x_test, y_train, y_test = train_test_split(pixels, digits.target, test_size=test_fraction,
                                                        random_state=seed, stratify=digits.target)

    def write(tmp: Path) -> None:
        for split, xs, ys in (("train", x_train, y_train), ("test", x_test, y_test)):
            for n, (x, y) in enumerate(zip(xs, ys)):
                (tmp / split / str(y)).mkdir(parents=True, exist_ok=True)
                Image.fromarray(x, mode="L").save(tmp / split / str(y) / f"{n:05d}.png")
    return _into_place(dst, write)


def prepare_shapes3d(dst: str | Path) -> Path:
    return prepare_shapes(dst, dims=3)


def prepare(name: str, dst: str | Path) -> Path:
    """Write the built-in dataset `name` (airetrain.catalog) to dst."""
    return globals()[DATASETS[name].writer](dst)
