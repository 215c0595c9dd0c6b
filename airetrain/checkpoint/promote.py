"""Make a checkpoint durable on the scratch root: copy to a temporary name, fsync, rename, verify.

The only durable copy must never be on tmp_shared (purged with the job), so promotion ends by
checking the promoted copy's sha256s and loading it (weights_only=True). The trainer promotes each
checkpoint in the background as it is written; the promote rule makes sure of the final one.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import store
from .store import CheckpointError
from ..fsutil import copy_atomic, copy_dir_atomic, link_atomic, room_for, same_filesystem

DURABLE_ROOT = "the durable root (scratch)"


def promote(entry: dict, durable_dir: str | Path, keep: int | None = None, full_check: bool = True) -> dict:
    """entry: the checkpoint's manifest entry plus its "path" (train.json's "checkpoint").

    Where the fast root and scratch are one filesystem (a laptop's default roots), the durable copy
    is a hard link to the file just written: no second copy of the bytes to write, hash and store.
    Elsewhere the copy's sha256s are checked as its bytes are written. full_check also reads the
    checkpoint back, hashes it and loads it (weights_only=True), before a link is made and after a
    copy: the promote rule does; the trainer's background promotion skips it to stay short (its
    file was hashed as it was written). With keep, older checkpoints on scratch are removed, but
    only after this one is in place there."""
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
        if full_check and same_filesystem(src, durable_dir):
            store.verify(src, entry)   # a corrupt file is never linked; a copy checks the bytes it copies
        with room_for(dst, entry["size"], DURABLE_ROOT):
            if store.kind(entry) == store.DCP:
                linked = copy_dir_atomic(src, dst, entry["files"], link=True)
            else:
                linked = link_atomic(src, dst)
                if not linked:
                    copy_atomic(src, dst, expected_sha256=entry["sha256"])
        mode = "linked" if linked else "copied"
    if (full_check and mode == "copied") or mode == "written there":
        store.verify(dst, entry)  # raises if it does not hash or load
    with room_for(durable_dir / store.MANIFEST, 0, DURABLE_ROOT):
        store.record(durable_dir, entry, keep)
    return {**{k: v for k, v in entry.items() if k != "path"}, "path": str(dst), "source": str(src),
            "mode": mode, "verified": True}


def promote_best(final: dict, durable_dir: str | Path, keep: int | None = None,
                 fast_dir: Callable[[], Path] | None = None, run: str = "<run>") -> dict | None:
    """The best checkpoint (checkpoint.monitor) that the final one names, durable and verified like it:
    its entry with path, or None where the run monitored nothing. Looked for on scratch, else where the
    final one was written, else on the fast root (fast_dir: its checkpoints directory, resolved only
    where needed: resolving the fast root logs which one it fell back to)."""
    best = final.get("best")
    if not best:
        return None
    if best["step"] == final["step"]:
        return final
    durable_dir = Path(durable_dir)
    places = list(dict.fromkeys([durable_dir, Path(final.get("source", final["path"])).parent]))
    found = _find(best["step"], final.get("fingerprint"), places)
    if found is None and fast_dir is not None and (fast := fast_dir()) not in places:
        places.append(fast)
        found = _find(best["step"], final.get("fingerprint"), [fast])
    if found is not None:
        return promote(found, durable_dir, keep)
    raise CheckpointError(f"the best checkpoint (step {best['step']}, {best['metric']} {best['value']:.6g}) "
                          f"is in none of {', '.join(map(str, places))}: no copy of it is left to promote. "
                          f"To train run {run} again from step 0: airetrain restart {run}")


def _find(step: int, fingerprint: str | None, directories: list[Path]) -> dict | None:
    """The manifest entry (with its path) of this config's checkpoint of that step, in the first directory
    that lists one."""
    for directory in directories:
        for entry in store.entries(directory):
            if entry["step"] == step and entry.get("fingerprint") == fingerprint:
                return {**entry, "path": str(directory / entry["file"])}
    return None


def promote_mirror(entry: dict, durable_dir: str | Path) -> dict:
    """Script mode: the launcher has already copied the script's checkpoint directory to scratch;
    every file there is hashed again against the mirror's index (raises if one differs)."""
    from .mirror import verify

    files = verify(durable_dir)
    if {rel: f["sha256"] for rel, f in files.items()} != entry["files"]:
        raise CheckpointError(f"{durable_dir}: the durable files differ from those train.json names")
    return {**entry, "path": str(durable_dir), "source": str(durable_dir), "mode": "already durable",
            "verified": True}

