"""Checkpoint files on disk: atomic writes, manifests with sha256s, verification, the newest valid one.

Two layouts, both readable without airetrain:
- "file" (DDP): step-00000100.pt, one file written by rank 0:
    torch.load(path, weights_only=True) -> {"model": state_dict, "optimizer": state_dict,
                                           "trainer": trainer state (below)}
- "dcp" (FSDP): step-00000100.dcp/, a torch.distributed.checkpoint directory (each rank writes its
  own shards; load it at any world size, or convert it with
  torch.distributed.checkpoint.format_utils.dcp_to_torch_save), plus trainer.pt with the trainer state.
The trainer state: step, epoch, step_in_epoch, config, scaler, scheduler, and every rank's RNG states.

Each directory has a manifest.json listing, per checkpoint, its step, epoch, size, fingerprint and
sha256 (for a directory: of every file, and one sha256 over that list). A checkpoint counts only once
its manifest entry exists; entries are written after the data is complete, fsynced and renamed.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import shutil
from pathlib import Path

import torch

from ..fsutil import (commit, fsync_dir, read_json, room_for, sha256_file, write_bytes_atomic, write_json_atomic,
                      write_stream_atomic)

log = logging.getLogger("airetrain.checkpoint.store")
MANIFEST = "manifest.json"
FILE, DCP, MIRROR = "file", "dcp", "mirror"   # kinds: one file, a DCP directory, a script's mirrored directory
FAST_ROOT = "the fast root"   # where the trainer writes its checkpoints ($TMP_SHARED, roots.tmp_shared, $TMPDIR)


def kind(entry: dict) -> str:
    """An entry's kind; entries written before DCP existed here have none and are files."""
    return entry.get("kind", FILE)
TRAINER_FILE = "trainer.pt"


class CheckpointError(RuntimeError):
    pass


def file_name(step: int, of_kind: str = FILE) -> str:
    return f"step-{step:08d}." + ("pt" if of_kind == FILE else "dcp")


def tmp_dir_name(step: int) -> str:
    """Where a sharded checkpoint is written before its rename (the same name on every rank)."""
    return f".{file_name(step, DCP)}.partial"


def _manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    return read_json(path) if path.exists() else {"checkpoints": []}


def entries(directory: str | Path) -> list[dict]:
    directory = Path(directory)
    return _manifest(directory)["checkpoints"] if directory.is_dir() else []


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _listed(entry: dict) -> dict:
    """What a manifest keeps of an entry (not where it was read from, or how it got there)."""
    return {k: v for k, v in entry.items() if k not in ("path", "source", "mode", "verified")}


def same(a: dict, b: dict) -> bool:
    """The same checkpoint: same file name, step and content hashes."""
    return _listed(a) == _listed(b)


def best_of(trainer: dict) -> dict:
    """What a manifest entry says of the best checkpoint (checkpoint.monitor) as of its own step:
    {"best": {step, epoch, metric, value}}, or nothing where the run monitors none."""
    best = (trainer.get("monitor") or {}).get("best")
    return {"best": best} if best else {}


def record(directory: Path, entry: dict, keep: int | None = None) -> None:
    """Add entry to the directory's manifest; with keep, delete all but the newest `keep` checkpoints
    and the best one (the step the newest entry names as best).

    The caller has verified the new checkpoint, so an older one is only removed once a newer,
    verified one is in the same directory."""
    manifest = _manifest(directory)
    entry = _listed(entry)
    listed = [e for e in manifest["checkpoints"] if e["file"] != entry["file"]]
    # Checkpoints of another config (the run retrained after a change) are not this history: they
    # are never counted against keep, nor can their higher steps push out the one just written.
    others = [e for e in listed if e.get("fingerprint") != entry.get("fingerprint")]
    kept = sorted([e for e in listed if e not in others] + [entry], key=lambda e: e["step"])
    best_step = (kept[-1].get("best") or {}).get("step")
    dropped = [e for e in kept[:-keep] if e["step"] != best_step] if keep else []
    manifest["checkpoints"] = others + [e for e in kept if e not in dropped]
    write_json_atomic(directory / MANIFEST, manifest)  # the manifest first: it never names a deleted file
    for old in dropped:
        remove(directory / old["file"])


def clean_partial(directory: str | Path) -> None:
    """Remove what killed saves left behind: temporary files and unfinished DCP directories.
    Never a checkpoint: those have final names, and only the manifest makes them count."""
    directory = Path(directory)
    for path in directory.glob(".*") if directory.is_dir() else []:
        if ".tmp." in path.name or path.name.endswith(".partial") or ".old." in path.name:
            remove(path)


def digest_of(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{n}:{h}\n" for n, h in sorted(files.items())).encode()).hexdigest()


def tree_bytes(tree) -> int:
    """The bytes of the tensors in a state: about the size of its checkpoint."""
    if isinstance(tree, torch.Tensor):
        return tree.numel() * tree.element_size()
    if isinstance(tree, dict):
        return sum(tree_bytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(tree_bytes(v) for v in tree)
    return 0


def serialize(state: dict) -> memoryview:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getbuffer()


def write_file(state: dict, directory: str | Path, step: int, fingerprint: str) -> dict:
    """DDP: serialize straight into a temporary name (hashed as it is written: no copy of the whole
    file in memory), fsync, rename, fsync the directory. Not yet recorded."""
    final = Path(directory) / file_name(step)
    with room_for(final, tree_bytes(state), FAST_ROOT):
        size, sha256 = write_stream_atomic(final, lambda f: torch.save(state, f))
    trainer = state["trainer"]
    return {"file": final.name, "kind": FILE, "step": step, "epoch": trainer["epoch"], "size": size,
            "sha256": sha256, "fingerprint": fingerprint, **best_of(trainer), "path": str(final)}


def save_file(state: dict, directory: str | Path, step: int, fingerprint: str, keep: int | None) -> dict:
    """DDP's save on the fast root: the file written, then recorded in its manifest (keep applied)."""
    entry = write_file(state, directory, step, fingerprint)
    with room_for(Path(directory) / MANIFEST, 0, FAST_ROOT):
        record(Path(directory), entry, keep)
    return entry


def commit_dir(partial: Path, trainer: dict, fingerprint: str) -> dict:
    """FSDP: add trainer.pt to a complete DCP directory, fsync and hash every file, rename it into place."""
    write_bytes_atomic(partial / TRAINER_FILE, serialize(trainer))
    files = {}
    for path in sorted(p for p in partial.iterdir() if p.is_file()):
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        files[path.name] = sha256_file(path)
    fsync_dir(partial)
    final = partial.with_name(file_name(trainer["step"], DCP))
    if final.exists():   # a leftover from an earlier session at the same step: replace it
        remove(final)
    commit(partial, final)
    size = sum((final / n).stat().st_size for n in files)
    return {"file": final.name, "kind": DCP, "step": trainer["step"], "epoch": trainer["epoch"], "size": size,
            "sha256": digest_of(files), "files": files, "fingerprint": fingerprint, **best_of(trainer),
            "path": str(final)}


def _load(path: Path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, flipped bits, foreign pickle
        raise CheckpointError(f"{path}: does not load with weights_only=True: {e}") from e


def verify(path: str | Path, entry: dict) -> dict:
    """Check every byte against the manifest's sha256s, then load safely (weights_only=True).

    Returns the whole state of a file checkpoint, or the trainer state of a DCP directory (its
    shards are read by every rank with torch.distributed.checkpoint.load after this check)."""
    path = Path(path)
    if kind(entry) == FILE:
        if sha256_file(path) != entry["sha256"]:
            raise CheckpointError(f"{path}: sha256 does not match its manifest (corrupt or truncated)")
        return _load(path)
    present = {p.name for p in path.iterdir()} if path.is_dir() else set()
    for name, digest in entry["files"].items():
        if name not in present:
            raise CheckpointError(f"{path}: {name} is missing")
        if sha256_file(path / name) != digest:
            raise CheckpointError(f"{path}/{name}: sha256 does not match its manifest (corrupt or truncated)")
    return _load(path / TRAINER_FILE)


def candidates(directories: list[str | Path], fingerprint: str) -> list[tuple[int, Path, dict]]:
    """(step, path, manifest entry) of the checkpoints of this config, newest first."""
    found = []
    for directory in map(Path, directories):
        for entry in entries(directory):
            path = directory / entry["file"]
            if entry.get("fingerprint") != fingerprint:
                log.info("not resuming from %s: it was trained with a different config", path)
            elif path.exists():
                found.append((entry["step"], path, entry))
    return sorted(found, key=lambda c: c[0], reverse=True)


def load_latest(directories: list[str | Path], fingerprint: str) -> tuple[dict, Path, dict] | None:
    """The newest checkpoint of this config that verifies; corrupt ones are reported and skipped."""
    for step, path, entry in candidates(directories, fingerprint):
        try:
            return verify(path, entry), path, entry
        except CheckpointError as e:
            log.warning("skipping checkpoint: %s", e)
    return None
