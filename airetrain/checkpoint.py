"""Checkpoint files: atomic save, verification, discovery of the newest valid one.

Format (a plain file any PyTorch user can read, no airetrain needed):
    torch.load(path, weights_only=True) -> {
        "model": state_dict, "optimizer": state_dict, "step": int, "epoch": int,
        "config": the run's resolved config, "rng": {"torch": ByteTensor, "python": tuple}}
Each checkpoint directory has a manifest.json listing file, step, epoch, size and sha256.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path

import torch

from .fsutil import read_json, sha256_file, write_bytes_atomic, write_json_atomic

log = logging.getLogger("airetrain.checkpoint")
MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    pass


# Keys that do not change what is computed: a run whose config differs only in these resumes.
# (epochs is one: raising it continues training from the newest checkpoint.)
_NOT_FINGERPRINTED = {"time_min", "slurm", "checkpoint", "cpus_per_rank", "mem_gb_per_rank"}
_NOT_FINGERPRINTED_NESTED = {("data", "workers"), ("data", "verify_sha256"), ("train", "log_every_steps"),
                             ("train", "epochs")}


FORMAT = 2  # bump when the checkpoint's layout changes: older files are then never resumed from


def fingerprint(config: dict) -> str:
    """Hash of the training-relevant config: a checkpoint resumes only a run with the same one."""
    kept = {k: v for k, v in config.items() if k not in _NOT_FINGERPRINTED}
    kept["__format__"] = FORMAT
    for section, key in _NOT_FINGERPRINTED_NESTED:
        kept[section] = {k: v for k, v in kept.get(section, {}).items() if k != key}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def file_name(step: int) -> str:
    return f"step-{step:08d}.pt"


def _manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    return read_json(path) if path.exists() else {"checkpoints": []}


def record(directory: Path, entry: dict, keep: int | None = None) -> None:
    """Add entry to the directory's manifest; with keep, delete all but the newest `keep` files."""
    manifest = _manifest(directory)
    entries = [e for e in manifest["checkpoints"] if e["file"] != entry["file"]] + [entry]
    entries.sort(key=lambda e: e["step"])
    dropped = entries[:-keep] if keep else []
    manifest["checkpoints"] = entries[-keep:] if keep else entries
    write_json_atomic(directory / MANIFEST, manifest)  # the manifest first: it never names a deleted file
    for old in dropped:
        (directory / old["file"]).unlink(missing_ok=True)


def save(state: dict, directory: str | Path, step: int, fingerprint: str, keep: int | None = None) -> dict:
    """Serialize, write to a temporary name, fsync, rename, record in the manifest."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getbuffer()
    final = directory / file_name(step)
    write_bytes_atomic(final, data)
    entry = {"file": final.name, "step": step, "epoch": state.get("epoch"), "size": len(data),
             "sha256": hashlib.sha256(data).hexdigest(), "fingerprint": fingerprint}
    record(directory, entry, keep)
    return {**entry, "path": str(final)}


def load_verified(path: str | Path, sha256: str | None = None) -> dict:
    """Load a checkpoint safely (weights_only=True) after checking its hash, if one is known."""
    path = Path(path)
    if sha256 is not None and sha256_file(path) != sha256:
        raise CheckpointError(f"{path}: sha256 does not match its manifest (corrupt or truncated)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, flipped bits, foreign pickle
        raise CheckpointError(f"{path}: does not load with weights_only=True: {e}") from e


def candidates(directories: list[str | Path], fingerprint: str) -> list[tuple[int, Path, dict]]:
    """(step, path, manifest entry) of the checkpoints of this config, newest first."""
    found = []
    for directory in map(Path, directories):
        for entry in _manifest(directory)["checkpoints"] if directory.is_dir() else []:
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
            return load_verified(path, entry["sha256"]), path, entry
        except CheckpointError as e:
            log.warning("skipping checkpoint: %s", e)
    return None
