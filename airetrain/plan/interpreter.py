"""Which Python the workflow's rules run `-m airetrain` with, and how it finds this package.

Not `python` from PATH: a user who calls `.venv/bin/snakemake` without activating the venv (a cron job,
a wrapper script) has another `python` first, and the launch would die with "No module named 'torch'"
in the run's log. The interpreter that runs Snakemake is the one the user installed airetrain into;
Snakemake runs every SLURM job with that same interpreter, so the choice holds inside jobs too.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.util import find_spec

from ..errors import ConfigError

# What the steps import (the package itself is put on PYTHONPATH by the workflow).
NEEDED = ("torch", "numpy", "pandas", "yaml", "jsonschema", "sklearn", "matplotlib")

# Prints the modules of argv that this interpreter cannot find, one per line; imports nothing.
_PROBE = "import importlib.util as u, sys; print('\\n'.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"


def missing_modules(python: str | None = None) -> list[str]:
    """The modules of NEEDED that python (default: this interpreter) cannot import, without importing them."""
    if python is None or os.path.realpath(python) == os.path.realpath(sys.executable):
        return [m for m in NEEDED if find_spec(m) is None]
    try:
        probe = subprocess.run([python, "-c", _PROBE, *NEEDED], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return list(NEEDED)
    return probe.stdout.split() if probe.returncode == 0 else list(NEEDED)


def rule_python(use_conda: bool, env=None) -> str:
    """The interpreter for the rules' shell commands.

    - With --use-conda: `python`, which is the rule's own conda environment there.
    - Else the interpreter running Snakemake, if it has everything the steps need.
    - Else `python` on PATH, if that has (an activated environment that Snakemake is not installed in).
    - Else stop before any job, naming the interpreters and how to fix it.
    """
    env = os.environ if env is None else env
    if use_conda:
        return "python"
    missing = missing_modules()
    if not missing:
        return sys.executable
    on_path = shutil.which("python", path=env.get("PATH"))
    if on_path and not missing_modules(on_path):
        return on_path
    found = f"; `python` on PATH is {on_path}, which cannot either" if on_path else ""
    raise ConfigError(
        f"Snakemake runs under {sys.executable}, which cannot import {', '.join(missing)}{found}. The rules "
        "need an interpreter with airetrain's dependencies: activate the environment you installed airetrain "
        "into (`source .venv/bin/activate`, or `conda activate airetrain` on Aire) and run snakemake from it, "
        "or run with --use-conda"
    )


def put_package_first(directory: str) -> None:
    """This checkout's package first on sys.path and on PYTHONPATH, for this process and every
    process it starts (the workflow's jobs: local, SLURM, --use-conda), installed or not."""
    if directory not in sys.path:
        sys.path.insert(0, directory)
    current = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [directory, current]))
