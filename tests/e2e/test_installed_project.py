"""A project of a user's own, outside the checkout, with airetrain installed from its wheel (not editable)
into a fresh environment: `airetrain init`, the demo run there with the project's own model, nothing
written into the installed package. And the workflow deployed by snakedeploy, as Snakemake workflows are."""
import hashlib
import json
import math
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import BIN, REPO, read_json, run

MODELS = '''
from torch import nn


def build(meta, cfg):
    """A user's own model for the digits: an MLP, which the built-in trainer has no name for."""
    c, h, w = meta["shape"]
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, 48), nn.ReLU(), nn.Linear(48, meta["classes"]))
'''


def hashes(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """A fresh virtual environment with the wheel installed, not editable. Its dependencies are the suite's
    own pinned ones (envs/requirements.txt), lent by a .pth line rather than installed again: a path line
    adds the suite's site-packages without running its .pth files, so the checkout's editable install
    stays out of sight, and airetrain imports from the wheel."""
    fresh = tmp_path_factory.mktemp("fresh") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(fresh)])
    run([sys.executable, "-m", "pip", "--python", str(fresh / "bin/python"), "install", "-q", "--no-deps",
         "--no-index", str(wheel)])
    site = Path(run([str(fresh / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                .stdout.strip())
    (site / "pinned-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return fresh, site / "airetrain"


def fresh_env(fresh: Path) -> dict:
    """A shell with the fresh environment first on PATH and nothing of the checkout's."""
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d and Path(d).resolve() != BIN.resolve()]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SCRATCH", "TMPDIR")}
    return {**env, "PATH": os.pathsep.join([str(fresh / "bin"), *path])}


def test_a_project_from_the_installed_wheel_trains_its_own_model(installed, tmp_path):
    fresh, package = installed
    env = fresh_env(fresh)
    where = run([str(fresh / "bin/python"), "-c", "import airetrain; print(airetrain.__file__)"], env=env, cwd=tmp_path,
                exact_env=True).stdout.strip()
    assert Path(where).is_relative_to(package), where   # the wheel's, not the checkout's
    before = hashes(package)

    project = tmp_path / "my-experiment"
    run(["airetrain", "init", str(project)], env=env, exact_env=True, cwd=tmp_path)
    (project / "mylab").mkdir()
    (project / "mylab/__init__.py").write_text("")
    (project / "mylab/models.py").write_text(MODELS)
    config = project / "config/config.yaml"   # edited as a user edits it: two values of the written file
    text = config.read_text()
    config.write_text(text.replace("{name: small_cnn, width: 32}", "{name: mylab.models:build}")
                      .replace("epochs: 5", "epochs: 1").replace("precision: bf16", "precision: fp32"))
    run(["airetrain", "plan"], env=env, exact_env=True, cwd=project)
    proc = run(["python", "-m", "snakemake", "--cores", "2"], env=env, exact_env=True, cwd=project, timeout=600)
    assert "8 of 8 steps (100%) done" in proc.stdout + proc.stderr
    trained = read_json(project / "results/first/train.json")
    losses = [m["loss"] for m in map(json.loads, (project / "results/first/metrics.jsonl").read_text().splitlines())
              if "loss" in m]
    assert len(losses) >= 2 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]   # it learned
    assert math.isfinite(trained["eval_loss"]) and trained["eval_accuracy"] > 0.3   # 10 classes: chance is 0.1

    checkpoint = read_json(project / "results/first/checkpoint.json")
    assert checkpoint["verified"] and Path(checkpoint["path"]).is_relative_to(project / ".airetrain/scratch")
    record = read_json(project / "results/first/run.json")
    assert "mylab/models.py" in record["code"]["files"]   # the project's module ran (and was captured)
    assert record["airetrain"]["commit"] is None and record["airetrain"]["version"]   # installed, no checkout
    assert record["config"]["model"]["name"] == "mylab.models:build"
    assert (project / "results/report/results.md").is_file() and (project / "logs/first/train.log").is_file()
    # the tools work from the project as from the checkout: its config and results by default
    status = run(["airetrain", "status"], env=env, exact_env=True, cwd=project).stdout
    assert "first" in status and "done" in status, status
    compared = json.loads(run(["airetrain", "compare", "first", "--json"], env=env, exact_env=True,
                              cwd=project).stdout)["figures"]["first"]
    assert (compared["eval_loss"], compared["eval_accuracy"]) == (trained["eval_loss"], trained["eval_accuracy"])
    assert compared["samples_per_s"] == (trained.get("steady_samples_per_s") or trained["samples_per_s"])
    assert hashes(package) == before   # nothing was written into the installed package
    assert not (REPO / "results/first").exists()


def test_the_workflow_deployed_by_snakedeploy_plans_the_checkouts_config(tmp_path):
    """snakedeploy deploy-workflow from a local clone: it copies config/ and profiles/ and writes
    workflow/Snakefile with a module. Its local provider names the module's Snakefile by the source's
    relative path (workflow/Snakefile), which does not resolve from the deployed folder; the GitHub
    provider names it github(...). The test points it at the clone, as the GitHub provider would at the
    repository, and dry-runs the deployment."""
    source, dest = tmp_path / "airetrain", tmp_path / "deployed"
    run(["git", "clone", "-q", str(REPO), str(source)])
    run([str(BIN / "snakedeploy"), "deploy-workflow", str(source), str(dest), "--tag", "v0.1.0"])
    snakefile = dest / "workflow/Snakefile"
    text = snakefile.read_text()
    assert '"workflow/Snakefile"' in text and "use rule * from airetrain" in text
    snakefile.write_text(text.replace('"workflow/Snakefile"', f'"{source}/workflow/Snakefile"'))
    assert (dest / "config/config.yaml").is_file() and (dest / "profiles/aire/profile.yaml").is_file()
    proc = run([str(BIN / "snakemake"), "-n", "--cores", "2"], cwd=dest, env={"SCRATCH": str(tmp_path / "s")})
    out = proc.stdout + proc.stderr
    assert "airetrain plan:" in out and "digits-ddp" in out and "rule train:" in out
    dry = run([str(BIN / "snakemake"), "-n", "--profile", "profiles/aire"], cwd=dest,
              env={"SCRATCH": str(tmp_path / "s")}, check=False)
    assert "rule train:" in dry.stdout + dry.stderr, dry.stdout + dry.stderr   # the deployed aire profile
    assert not subprocess.run(["git", "-C", str(source), "status", "--porcelain"], capture_output=True,
                              text=True).stdout   # nothing written into the workflow's source
