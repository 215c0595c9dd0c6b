"""Where things live: the scratch root (durable) and the tmp_shared root (fast, per job).

Aire's variables are read at the moment of use, never hard-coded: $TMP_SHARED exists only
inside a job (and has been seen empty), so the fast root is resolved inside the job.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("airetrain.roots")

# root kind -> (Aire variable, laptop fallback relative to the working directory)
_SOURCES = {
    "scratch": ("SCRATCH", ".airetrain/scratch"),
    "tmp_shared": ("TMP_SHARED", ".airetrain/tmp_shared"),
}


@dataclass(frozen=True)
class Root:
    path: Path
    source: str  # "config", "$SCRATCH", "$TMP_SHARED", "$TMPDIR" or "local fallback"

    @property
    def node_local(self) -> bool:
        """$TMPDIR is per node: a multi-node job must stage on every node."""
        return self.source == "$TMPDIR"

    @property
    def fallback(self) -> bool:
        return self.source in ("$TMPDIR", "local fallback")


def resolve_root(kind: str, configured: str | None, env=None) -> Root:
    """configured path, else the Aire variable, else $TMPDIR in a SLURM job, else ./.airetrain/<kind>.

    $TMPDIR counts only inside a SLURM job, where it is the job's own directory; elsewhere
    (Snakemake sets TMPDIR=/tmp for every job) it would be shared by unrelated workflows.
    """
    env = os.environ if env is None else env
    variable, local = _SOURCES[kind]
    if configured:
        return Root(Path(configured).expanduser().absolute(), "config")
    if env.get(variable, "").strip():
        return Root(Path(env[variable]).absolute(), f"${variable}")
    if env.get("TMPDIR", "").strip() and env.get("SLURM_JOB_ID"):
        root = Root(Path(env["TMPDIR"]) / f"airetrain-{kind}", "$TMPDIR")
        log.warning("%s root: $%s is not set, falling back to $TMPDIR (%s)", kind, variable, root.path)
        return root
    root = Root(Path(local).absolute(), "local fallback")
    log.warning("%s root: $%s is not set (and no SLURM job's $TMPDIR), using %s", kind, variable, root.path)
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

