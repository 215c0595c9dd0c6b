"""A run's fingerprint: the hash of what its training computes, which checkpoints and captured code are
filed under. Torch-free: the plan (in Snakemake's parse) reads it too.
"""
from __future__ import annotations

import hashlib
import json

from ..run_config import RunConfig

# Keys that do not change what is computed: a run whose config differs only in these resumes.
# (epochs is one: raising it continues training from the newest checkpoint; early_stop another: it
# only decides where training ends.)
_NOT_FINGERPRINTED = {"time_min", "slurm", "checkpoint", "cpus_per_rank", "mem_gb_per_rank", "code", "tracking",
                      "health", "retry", "pack"}
_NOT_FINGERPRINTED_NESTED = {("data", "workers"), ("data", "verify_sha256"), ("train", "log_every_steps"),
                             ("train", "epochs"), ("train", "early_stop")}


FORMAT = 3  # bump when the checkpoint's layout changes: older files are then never resumed from


def fingerprint(config: RunConfig, init_sha256: str | None = None) -> str:
    """Hash of the training-relevant config, and of the weights it starts from (model.init_from's
    sha256): a checkpoint resumes only a run with the same ones."""
    kept = {k: v for k, v in config.to_dict().items() if k not in _NOT_FINGERPRINTED}
    kept["__format__"] = FORMAT
    if init_sha256:
        kept["__init__"] = init_sha256
    for section, key in _NOT_FINGERPRINTED_NESTED:
        kept[section] = {k: v for k, v in kept.get(section, {}).items() if k != key}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]
