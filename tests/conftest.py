import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")


def run(cmd, cwd=None, env=None, check=True, timeout=600):
    """Run a command, return the CompletedProcess; on failure show its output."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **(env or {})}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def read_json(path):
    return json.loads(Path(path).read_text())


def snakemake(workdir: Path, configfile: Path, *args, check=True, env=None, timeout=900):
    return run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--configfile", str(configfile),
                *args], cwd=workdir, check=check, env=env, timeout=timeout)


@pytest.fixture
def no_aire_env(monkeypatch):
    """A laptop: none of Aire's variables set, so the local fallbacks apply."""
    for var in ("SCRATCH", "TMP_SHARED", "TMPDIR", "SLURM_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
