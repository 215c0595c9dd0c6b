"""Where things live: the scratch root (durable) and the tmp_shared root (fast, per job).

The durable root is decided once, where the workflow is planned, and carried in the plan: every
later step, and the Snakefile parsed again inside each job, uses the plan's value. It never falls
back to a per-job or node-local directory ($TMPDIR, $TMP_SHARED), which SLURM purges when the job
ends. The fast root is resolved inside the job: $TMP_SHARED exists only there (and has been seen
empty), and $TMPDIR is the job's own node-local directory.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("airetrain.roots")

# Without $SCRATCH: a directory under the working directory, which Snakemake already needs every
# node of a job to see (its -D); with the fast root's last fallback beside it for laptops.
SCRATCH_FALLBACK = ".airetrain/scratch"
FAST_FALLBACK = ".airetrain/tmp_shared"


@dataclass(frozen=True)
class Root:
    path: Path
    source: str  # "config", "$SCRATCH", "$TMP_SHARED", "$TMPDIR" or "working directory"

    @property
    def node_local(self) -> bool:
        """$TMPDIR is per node: a multi-node job must stage on every node."""
        return self.source == "$TMPDIR"

    @property
    def fallback(self) -> bool:
        return self.source in ("$TMPDIR", "working directory")


def _set(env, name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def durable_root(configured: str | None, env=None) -> Root:
    """roots.scratch, else $SCRATCH, else ./.airetrain/scratch under the working directory (warned)."""
    env = os.environ if env is None else env
    if configured:
        return Root(Path(configured).expanduser().absolute(), "config")
    if _set(env, "SCRATCH"):
        return Root(Path(env["SCRATCH"]).absolute(), "$SCRATCH")
    root = Root(Path(SCRATCH_FALLBACK).absolute(), "working directory")
    log.warning("durable root: $SCRATCH is not set, so datasets and checkpoints go to %s under the working "
                "directory; set roots.scratch in the config to put them elsewhere", root.path)
    return root


def fast_root(configured: str | None, env=None) -> Root:
    """roots.tmp_shared, else $TMP_SHARED, else $TMPDIR in a SLURM job, else ./.airetrain/tmp_shared.

    $TMPDIR counts only inside a SLURM job, where it is the job's own directory; elsewhere
    (Snakemake sets TMPDIR=/tmp for every job) it would be shared by unrelated workflows.
    """
    env = os.environ if env is None else env
    if configured:
        return Root(Path(configured).expanduser().absolute(), "config")
    if _set(env, "TMP_SHARED"):
        return Root(Path(env["TMP_SHARED"]).absolute(), "$TMP_SHARED")
    if _set(env, "TMPDIR") and env.get("SLURM_JOB_ID"):
        root = Root(Path(env["TMPDIR"]) / "airetrain-tmp_shared", "$TMPDIR")
        log.warning("fast root: $TMP_SHARED is not set, falling back to $TMPDIR (%s, node-local: staged on "
                    "every node)", root.path)
        return root
    root = Root(Path(FAST_FALLBACK).absolute(), "working directory")
    log.warning("fast root: $TMP_SHARED is not set (and no SLURM job's $TMPDIR), using %s", root.path)
    return root


def is_under(path: Path, parent: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(parent))
        return True
    except ValueError:
        return False


def run_dir(root: Path, run: str) -> Path:
    """Everything of one run under a root: <root>/airetrain/<run>."""
    return root / "airetrain" / run


def fast_run_dir(configured: str | None, run: str) -> Path:
    """The run's directory on the fast root this process sees (roots.tmp_shared as configured, else the
    environment's): what a step after the training, in the same job, or a shell on the login node finds."""
    return run_dir(fast_root(configured).path, run)

