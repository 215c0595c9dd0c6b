"""Make a checkpoint durable on the scratch root: copy to .tmp, fsync, rename, verify.

The only durable copy must never be on tmp_shared (purged with the job), so promotion
ends by loading the promoted file (weights_only=True) and checking its sha256.
"""
from __future__ import annotations

from pathlib import Path

from . import checkpoint
from .fsutil import copy_atomic, sha256_file


def promote(entry: dict, durable_dir: str | Path) -> dict:
    """entry: the checkpoint's manifest entry plus its "path" (train.json's "checkpoint")."""
    src, durable_dir, sha256 = Path(entry["path"]), Path(durable_dir), entry["sha256"]
    dst = durable_dir / src.name
    if dst.exists() and sha256_file(dst) == sha256:
        mode = "already durable"
    else:
        copy_atomic(src, dst, expected_sha256=sha256)
        mode = "copied"
    checkpoint.load_verified(dst, sha256)  # raises if it does not hash or load
    entry = {k: v for k, v in entry.items() if k != "path"}
    checkpoint.record(durable_dir, entry)
    return {**entry, "path": str(dst), "source": str(src), "mode": mode, "verified": True}
