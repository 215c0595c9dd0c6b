"""The fast root's quotas against a dataset: refused in the plan, before anything is submitted.

$TMP_SHARED (and $SCRATCH) count files as well as bytes, and on Lustre each file costs a metadata
operation to create, so a dataset of many small files is slow to stage long before it is over the
file quota. The size comes from what the dataset carries (a shard index, or the files.json of a
prepared dataset), so that the plan, which Snakemake runs again inside every job, never walks a
million-file tree. A folder without either is counted once, by the plan step (`airetrain resolve`),
with a walk that stops as soon as it passes the file quota (walked); the stage step checks it again
after its own scan, before it copies anything, since the folder may change while the run waits.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError
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


def count_files(path: str | Path, limit: int) -> tuple[int, int, bool]:
    """(files, bytes, complete) under path, walked until the count passes limit (then complete is
    False): a folder of millions of files over the quota costs limit + 1 entries, not millions."""
    files = nbytes = 0
    pending = [Path(path)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif entry.is_file():
                    files += 1
                    nbytes += entry.stat().st_size
                    if files > limit:
                        return files, nbytes, False
    return files, nbytes, True


def walked(plan):
    """The plan with the size of a dataset folder that carries neither an index nor a files.json,
    counted by a walk (plan.dataset_size "from": "walk"); ConfigError where it is over a quota. For
    the plan step only: it runs once per plan, never at a parse of the Snakefile."""
    from .catalog import prepared   # the datasets the workflow writes itself, with their files.json

    path, quota = plan.dataset, plan.fast_root_quota
    if path is None or plan.dataset_size is not None or plan.config.data.name in prepared() \
            or not Path(path).is_dir():
        return plan
    files, nbytes, complete = count_files(path, quota["max_files"])
    problems, warnings = quota_messages(path, files, nbytes, quota["max_files"], quota["max_gb"],
                                        complete=complete)
    if problems:
        raise ConfigError("; ".join(f"runs.{plan.run}.data.path: {p}" for p in problems)
                          + "; nothing of this run was submitted")
    return plan.replace(dataset_size={"files": files, "bytes": nbytes, "format": "folder", "from": "walk"},
                        warnings=[*plan.warnings, *(f"run {plan.run}: {w}" for w in warnings)])


def pack_command(src: str | Path) -> str:
    src = str(src).rstrip("/")
    return f"airetrain pack {src} {src}-shards (then data.path: {src}-shards)"


def quota_messages(src: str | Path, files: int, nbytes: int, max_files: int, max_gb: float,
                   packed: bool = False, complete: bool = True) -> tuple[list[str], list[str]]:
    """(problems, warnings) of staging `files` files and `nbytes` bytes from src onto the fast root
    (packed: its shards, which no further packing makes fewer; complete False: a walk stopped at
    files, and there are more)."""
    problems, warnings = [], []
    what = (f"the dataset {src} ({files:,} files, {nbytes / 1e9:,.1f} GB)" if complete else
            f"the dataset {src} (more than {max_files:,} files: the count stopped there)")
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
