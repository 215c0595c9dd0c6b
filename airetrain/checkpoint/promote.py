"""Make a checkpoint durable on the scratch root: copy to a temporary name, fsync, rename, verify.

The only durable copy must never be on tmp_shared (purged with the job), so promotion ends by
checking the promoted copy's sha256s and loading it (weights_only=True). The trainer promotes each
checkpoint in the background as it is written; the promote rule makes sure of the final one.
"""
from __future__ import annotations

from pathlib import Path

from . import store
from .store import CheckpointError
from ..fsutil import copy_atomic, copy_dir_atomic


def promote(entry: dict, durable_dir: str | Path, keep: int | None = None, full_check: bool = True) -> dict:
    """entry: the checkpoint's manifest entry plus its "path" (train.json's "checkpoint").

    The copy's sha256s are checked as its bytes are written. full_check also reads the durable
    copy back, hashes it and loads it (weights_only=True): the promote rule does; the trainer's
    background promotion skips it to stay short. With keep, older checkpoints on scratch are
    removed, but only after this one is in place there."""
    if store.kind(entry) == store.MIRROR:
        return promote_mirror(entry, durable_dir)
    src, durable_dir = Path(entry["path"]), Path(durable_dir)
    dst = durable_dir / src.name
    try:
        if dst == src:
            mode = "written there"
        else:
            store.verify(dst, entry)
            mode = "already durable"
    except (CheckpointError, FileNotFoundError, NotADirectoryError):
        if store.kind(entry) == store.DCP:
            copy_dir_atomic(src, dst, entry["files"])
        else:
            copy_atomic(src, dst, expected_sha256=entry["sha256"])
        mode = "copied"
    if full_check or mode == "written there":
        store.verify(dst, entry)  # raises if it does not hash or load
    store.record(durable_dir, entry, keep)
    return {**{k: v for k, v in entry.items() if k != "path"}, "path": str(dst), "source": str(src),
            "mode": mode, "verified": True}


def promote_mirror(entry: dict, durable_dir: str | Path) -> dict:
    """Script mode: the launcher has already copied the script's checkpoint directory to scratch;
    every file there is hashed again against the mirror's index (raises if one differs)."""
    from .mirror import verify

    files = verify(durable_dir)
    if {rel: f["sha256"] for rel, f in files.items()} != entry["files"]:
        raise CheckpointError(f"{durable_dir}: the durable files differ from those train.json names")
    return {**entry, "path": str(durable_dir), "source": str(durable_dir), "mode": "already durable",
            "verified": True}
