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

import getpass
import os
import shutil
import subprocess
from pathlib import Path

from .errors import ConfigError
from .fsutil import nearest_existing, read_json
from .dataset_trees import DATASET_FILES
from .shards import INDEX, MEMBERS, WIDS, shard_index
from .text import human_bytes

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


def quota_rows(text: str) -> list[tuple[str, list[str]]]:
    """(filesystem, its figures) from `lfs quota` or `quota -s`: a header with 'files', then one row per
    filesystem, whose name may stand alone on a line when it is long."""
    rows, name = [], None
    lines = text.splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if "files" in line.split()), len(lines))
    for line in lines[start:]:
        words = line.split()
        if len(words) == 1:
            name = words[0]
        elif words:
            if name is None or not words[0][0].isdigit():
                name, words = words[0], words[1:]
            rows.append((name, words))
            name = None
    return rows


def lfs_room(path: str | Path) -> int | None:
    """Bytes left under the user's block quota on a Lustre path (`lfs quota -u $USER path`, whose space
    columns are kB: used, quota, limit); None without lfs, or where no limit is set."""
    if not shutil.which("lfs"):
        return None
    try:
        text = subprocess.run(["lfs", "quota", "-u", getpass.getuser(), str(path)], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = quota_rows(text)
    words = [w.rstrip("*") for w in rows[0][1][:3]] if rows else []
    if len(words) < 3 or not all(w.isdigit() for w in words):
        return None
    used, limits = int(words[0]), [int(w) for w in words[1:] if int(w)]
    return max(min(limits) - used, 0) * 1024 if limits else None


def checkpoint_bytes(plan) -> tuple[int, str] | None:
    """(bytes of one of the run's checkpoints, where that figure is from): the run's newest checkpoint
    on scratch, else the memory estimate's parameters; None where neither is known yet."""
    manifest = Path(plan.checkpoints_dir) / "manifest.json"
    try:
        listed = read_json(manifest)["checkpoints"]
    except (OSError, ValueError, KeyError):
        listed = []
    if listed:
        return listed[-1]["size"], f"its newest checkpoint on scratch ({listed[-1]['file']})"
    if (estimate := plan.memory_estimate or {}).get("checkpoint_bytes"):
        return estimate["checkpoint_bytes"], "the memory estimate's parameters and optimizer state"
    return None


def durable_room(plan) -> None:
    """Refuse a run whose durable root cannot hold checkpoint.keep checkpoints and the one being
    written (its free space, and the user's quota there where `lfs quota` tells it), before anything
    is submitted: a promotion that fails after hours of training loses them."""
    size = checkpoint_bytes(plan)
    if size is None:
        return
    keep, (each, source) = plan.config.checkpoint.keep, size
    directory = Path(plan.checkpoints_dir)
    # the run's own checkpoints there make way for the new ones (keep removes them)
    present = sum(p.stat().st_size for p in directory.glob("step-*") if p.is_file()) if directory.is_dir() else 0
    needed = (keep + 1) * each - present
    free = shutil.disk_usage(nearest_existing(directory)).free
    quota = lfs_room(nearest_existing(directory))
    room = free if quota is None else min(free, quota)
    if room >= needed:
        return
    left = f"{human_bytes(free)} free" + ("" if quota is None else
                                          f", {human_bytes(quota)} left of your quota (lfs quota)")
    raise ConfigError(f"runs.{plan.run}.checkpoint.keep: {keep}: the durable root {plan.roots.scratch} cannot hold "
                      f"{keep + 1} checkpoints (keep, and the one being written) of about {human_bytes(each)} "
                      f"(from {source}): they need {human_bytes(needed)}, and it has {left}; free space there, "
                      "or lower checkpoint.keep; nothing of this run was submitted")


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
