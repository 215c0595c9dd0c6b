"""The stage step: the run's dataset onto the fast root, once per job or on every node, and stage.json.

Once per job on storage every node of the job sees ($TMP_SHARED, roots.tmp_shared); on each node
where the fast root is node-local (the job's $TMPDIR) and the job spans several nodes.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

from ..quota import quota_messages
from ..records import Plan, StageRecord, read_record, write_record
from ..roots import Root, fast_root, run_dir
from ..shards import INDEX, shard_index
from ..cluster.slurm import on_every_node
from .transfer import StageError, copy_dataset


def stage_dataset(src: str | Path, dst: str | Path, fmt: str = "auto", verify_sha256: bool = False,
                  limits: dict | None = None) -> dict:
    """Stage a dataset folder, or the shards of a packed one (fmt auto: packed where it has a shard index).

    limits ({"max_files", "max_gb"}): the fast root's quotas, checked after the scan, before copying."""
    shards = shard_index(src) if fmt != "folder" else None
    if fmt == "shards" and shards is None:
        raise StageError(f"data.format is shards, but {src} has no shard index ({INDEX}): run airetrain pack")
    return copy_dataset(src, dst, verify_sha256=verify_sha256, shards=shards, quota=_quota_check(src, limits))


def _quota_check(src: str | Path, limits: dict | None):
    """The check the stage step runs after its scan, where the plan could not know the size."""
    if not limits:
        return None

    def check(files: int, nbytes: int) -> None:
        problems, warnings = quota_messages(src, files, nbytes, limits["max_files"], limits["max_gb"])
        for warning in warnings:
            print(f"WARNING: {warning}", flush=True)
        if problems:
            raise StageError("; ".join(problems))
    return check


def stage_record(copied: dict | None, fast: Root, host: str | None, nodes: dict | None = None) -> StageRecord:
    """stage.json from what the copy did (None: nothing to stage, the data is synthetic)."""
    copied = copied or {"source": None, "target": None, "format": None, "files": 0, "bytes": 0, "copied_files": 0,
                        "copied_bytes": 0, "seconds": 0.0, "mb_per_s": None, "mode": "none", "engine": None,
                        "sha256_verified": False}
    return StageRecord(**copied, fast_root=str(fast.path), fast_root_source=fast.source, host=host, nodes=nodes)


def stage_run(plan_path: str, out: str | Path, this_node: bool = False) -> StageRecord:
    """Stage the run of plan_path and write its stage.json to out (this_node: this node's part only)."""
    plan = read_record(plan_path, Plan)
    fast = fast_root(plan.roots.tmp_shared)
    out = Path(out)
    if plan.dataset is None:  # synthetic data: made in memory by the trainer
        record = stage_record(None, fast, None)
        print("nothing to stage: the dataset is synthetic")
    elif fast.node_local and plan.nodes > 1 and os.environ.get("SLURM_JOB_ID") and not this_node:
        print(f"{fast.path} is node-local: staging on each of {plan.nodes} nodes", flush=True)
        on_every_node(plan.nodes, plan.cpus_per_node, ["stage", "--plan", plan_path, "--out", str(out), "--this-node"])
        per_node = {p.stem.split(".", 1)[1]: read_record(p, StageRecord)
                    for p in sorted(out.parent.glob(f"{out.stem}.*.json"))}
        record = {**per_node[min(per_node)], "nodes": per_node}
    else:
        target = run_dir(fast.path, plan.run) / "data"
        data = plan.config.data
        # the plan checked the quotas where the dataset's index or manifest gave its size; a count by
        # a walk is checked again against the scan, as the folder may have grown while the run waited
        limits = plan.fast_root_quota if (plan.dataset_size or {}).get("from", "walk") == "walk" else None
        copied = stage_dataset(plan.dataset, target, data.format, data.verify_sha256, limits)
        record = stage_record(copied, fast, socket.gethostname())
        print(f"staged {record['files']} files ({record['bytes'] / 1e6:.1f} MB, {record['format']}) to {target} "
              f"on {record['host']}: {record['mode']}, {record['seconds']:.2f} s", flush=True)
        if this_node:
            out = out.with_name(f"{out.stem}.{record['host']}.json")
    write_record(out, StageRecord, record)
    return record
