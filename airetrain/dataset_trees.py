"""How datasets lie on disk: the listing of a directory tree, a prepared dataset's manifest, and the
image-folder layout (one folder per class, split into train/ and test/ or val/).

Shared by the steps that write datasets (prepare, pack), copy them (stage) and read them (the
trainer, and the plan's size and shape checks).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .shards import shard_index

DATASET_FILES = "files.json"   # a prepared dataset's manifest: {"files": {rel: {"size", "sha256"}}}
STAGE_RECORD = ".airetrain-stage.json"   # what the last stage left in its target: not part of the data
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
TEST_SPLITS = ("test", "val")   # ImageNet's held-out split is val/


def scan(root: Path, skip: frozenset = frozenset({STAGE_RECORD})) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of every regular file below root, but the top-level names in skip.

    One thread: on 2 cores, threads made it slower (the GIL between stat calls).
    """
    out: dict[str, tuple[int, int]] = {}
    stack = [("", str(root))]
    while stack:
        prefix, directory = stack.pop()
        with os.scandir(directory) as it:
            for entry in it:
                rel = prefix + entry.name
                if rel in skip:
                    continue
                if entry.is_dir(follow_symlinks=False):  # d_type: no stat call
                    stack.append((rel + "/", entry.path))
                elif entry.is_file():
                    st = entry.stat()
                    out[rel] = (st.st_size, st.st_mtime_ns)
    return out


def listing_digest(files: dict) -> str:
    """One hash of every (path, size, mtime): equal digests mean an unchanged dataset."""
    h = hashlib.sha256()
    for rel in sorted(files):
        size, mtime = files[rel]
        h.update(f"{rel}\0{size}\0{mtime}\n".encode())
    return h.hexdigest()


def image_folder_splits(top_level: set[str]) -> dict[str, str | None]:
    """The path prefix of each split of an image folder, from its top-level directories: train/ and test/
    (or val/); a folder with neither is all training data, one sub-folder per class."""
    if "train" not in top_level:
        return {"train": "", "test": None}
    test = next((name for name in TEST_SPLITS if name in top_level), None)
    return {"train": "train/", "test": f"{test}/" if test else None}


def image_folder_classes(root: str | Path) -> list[str] | None:
    """The class names (training sub-folders) of an image folder or its shards, without reading every
    path: the shard index lists folder counts; a folder is listed two levels deep. None if absent."""
    root = Path(root)
    if (index := shard_index(root)) is not None:
        folders = index["folders"]
    elif root.is_dir():
        folders = {p.name: 0 for p in root.iterdir() if p.is_dir()}
        if "train" in folders:
            folders.update({f"train/{p.name}": 0 for p in (root / "train").iterdir() if p.is_dir()})
    else:
        return None
    prefix = image_folder_splits({f for f in folders if "/" not in f})["train"]
    return sorted(f[len(prefix):] for f in folders if f.startswith(prefix) and "/" not in f[len(prefix):])
