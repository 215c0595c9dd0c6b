"""The fast root's quotas against a dataset: refused in the plan, before anything is submitted.

$TMP_SHARED (and $SCRATCH) count files as well as bytes, and on Lustre each file costs a metadata
operation to create, so a dataset of many small files is slow to stage long before it is over the
file quota. The size comes from what the dataset carries (a shard index, or the files.json of a
prepared dataset), so that the plan, which Snakemake runs again inside every job, never walks a
million-file tree; a folder without either is checked by the stage step, after its scan and before
it copies anything.
"""
from __future__ import annotations

from pathlib import Path

from .fsutil import read_json
from .layouts import DATASET_FILES
from .shards import INDEX, MEMBERS, WIDS, shard_index

SLOW_SHARE = 0.1   # above this share of the file quota, staging file by file is slow: pack it


def dataset_size(path: str | Path | None) -> dict | None:
    """{"files", "bytes", "format", "from"} of what staging copies, without scanning; None when unknown."""
    if path is None:
        return None
    path = Path(path)
    if (index := shard_index(path)) is not None:
        extra = sum((path / name).stat().st_size for name in (INDEX, MEMBERS, WIDS) if (path / name).exists())
        return {"files": index["shard_count"] + 3, "bytes": index["shard_bytes"] + extra, "format": "shards",
                "from": str(path / INDEX)}
    if (path / DATASET_FILES).is_file():
        listing = read_json(path / DATASET_FILES)["files"]
        return {"files": len(listing) + 1, "bytes": sum(f["size"] for f in listing.values()), "format": "folder",
                "from": str(path / DATASET_FILES)}
    return None


def pack_command(src: str | Path) -> str:
    src = str(src).rstrip("/")
    return f"airetrain pack {src} {src}-shards (then data.path: {src}-shards)"


def quota_messages(src: str | Path, files: int, nbytes: int, max_files: int, max_gb: float,
                   packed: bool = False) -> tuple[list[str], list[str]]:
    """(problems, warnings) of staging `files` files and `nbytes` bytes from src onto the fast root
    (packed: its shards, which no further packing makes fewer)."""
    problems, warnings = [], []
    what = f"the dataset {src} ({files:,} files, {nbytes / 1e9:,.1f} GB)"
    if files > max_files:
        problems.append(f"{what} would exceed the fast root's file quota of {max_files:,} files per job "
                        f"(site.fast_root_max_files); pack it into shards first: {pack_command(src)}")
    elif files > SLOW_SHARE * max_files and not packed:
        warnings.append(f"{what} is {files / max_files:.0%} of the fast root's file quota ({max_files:,}): "
                        f"staging it file by file is slow on Lustre; pack it into shards: {pack_command(src)}")
    if nbytes > max_gb * 1e9:
        problems.append(f"{what} would exceed the fast root's quota of {max_gb:,g} GB per job "
                        "(site.fast_root_max_gb); train on a subset, or split the dataset across runs")
    return problems, warnings
