"""The rules' interpreter: Snakemake's own, not the first `python` on an unactivated shell's PATH; where
that cannot work, the workflow stops before any job and says how to fix it."""
import sys
from pathlib import Path

import pytest

from airetrain.plan.interpreter import NEEDED, missing_modules, rule_python

from conftest import REPO, run, unactivated_env

PYTHON_VERSION = f"python{sys.version_info[0]}.{sys.version_info[1]}"
SITE_PACKAGES = Path(sys.executable).parents[1] / "lib" / PYTHON_VERSION / "site-packages"
DEBIAN_PYTHON = "/usr/bin/python3"   # Debian's own interpreter: no torch
needs_debian_python = pytest.mark.skipif(not Path(DEBIAN_PYTHON).exists(), reason=f"needs {DEBIAN_PYTHON}")


def test_snakemakes_own_interpreter_is_used_when_it_has_everything():
    assert missing_modules() == []
    assert rule_python(use_conda=False, env={"PATH": "/nonexistent"}) == sys.executable


def test_with_conda_the_rules_environment_python_is_used():
    assert rule_python(use_conda=True) == "python"


@needs_debian_python
def test_an_interpreter_without_torch_is_recognised_without_importing_anything():
    assert "torch" in missing_modules(DEBIAN_PYTHON)
    assert missing_modules("/nonexistent/python") == list(NEEDED)


@pytest.fixture
def snakemake_without_torch(tmp_path):
    """Snakemake installed where torch is not (as in a tool environment of its own): Debian's python with
    this venv's packages, torch left out."""
    site = tmp_path / "site"
    site.mkdir()
    for entry in SITE_PACKAGES.iterdir():
        if not entry.name.startswith(("torch", "functorch", "__editable__", "airetrain")) and entry.suffix != ".pth":
            (site / entry.name).symlink_to(entry)
    return site


@needs_debian_python
def test_without_any_usable_interpreter_the_workflow_stops_before_any_job(tmp_path, snakemake_without_torch):
    env = unactivated_env(tmp_path, PYTHONPATH=str(snakemake_without_torch))
    work = tmp_path / "work"
    proc = run([DEBIAN_PYTHON, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2",
                "--configfile", str(REPO / "config/config.yaml")], env=env, exact_env=True, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"Snakemake runs under {DEBIAN_PYTHON}, which cannot import torch" in out
    assert "activate the environment" in out and "--use-conda" in out
    assert not (work / "results").exists() and not (work / "logs").exists()   # no job ran


@needs_debian_python
def test_an_activated_environment_is_used_when_snakemake_lives_elsewhere(tmp_path, snakemake_without_torch):
    """Snakemake from a tool environment, the training environment activated: its python (on PATH) runs the rules."""
    env = unactivated_env(tmp_path, PYTHONPATH=str(snakemake_without_torch))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    proc = run([DEBIAN_PYTHON, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path / "work"),
                "-n", "-p", "--configfile", str(REPO / "config/config.yaml")], env=env, exact_env=True)
    assert f"{Path(sys.executable).parent / 'python'} -m airetrain launch" in proc.stdout + proc.stderr
