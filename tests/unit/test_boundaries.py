"""What must not import torch: the planning, staging and report code, and Snakemake's own process
(the Snakefile's parse on a login node, in every job, for every `snakemake -n`)."""
import subprocess
import sys

from conftest import REPO, SNAKEMAKE, run

# Every module of the packages named, found by walking them: a module added later is checked too.
PROBE = """
import importlib, pkgutil, sys
for name in {packages}:
    module = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        importlib.import_module(info.name)
print(sorted(m for m in ('torch', 'snakemake') if m in sys.modules))
"""


def test_planning_staging_and_reporting_import_no_torch_and_the_package_no_snakemake():
    shared = [f"airetrain.{p.stem}" for p in sorted((REPO / "airetrain").glob("*.py"))
              if p.stem not in ("__main__", "job", "lightning", "hf")]   # what a training script imports, with torch
    packages = ["airetrain.plan", "airetrain.stage", "airetrain.report", *shared,
                "airetrain.train.launcher.launch", "airetrain.train.launcher.lock"]
    out = subprocess.run([sys.executable, "-c", PROBE.format(packages=packages)], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert "airetrain.roots" in packages and "airetrain.run_config" in packages
    assert out.strip() == "[]"


def test_prepare_runs_without_torch(tmp_path):
    """`airetrain prepare` writes the digits dataset where torch cannot be imported at all."""
    blocker = tmp_path / "no-torch"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text("raise ImportError('torch is blocked in this test')\n")
    proc = run([sys.executable, "-m", "airetrain", "prepare", str(tmp_path / "digits")],
               env={"PYTHONPATH": f"{blocker}:{REPO}"})
    blocked = run([sys.executable, "-c", "import torch"], env={"PYTHONPATH": f"{blocker}:{REPO}"}, check=False)
    assert "torch is blocked" in blocked.stderr, proc.stdout   # the block held
    assert (tmp_path / "digits" / "meta.json").is_file() and (tmp_path / "digits" / "files.json").is_file()


def test_snakemakes_parse_of_the_workflow_imports_no_torch(tmp_path):
    """-X importtime lists every module the process imported, on stderr."""
    proc = subprocess.run([sys.executable, "-X", "importtime", SNAKEMAKE, "-s", str(REPO / "Snakefile"),
                           "-d", str(tmp_path), "-n", "--configfile", str(REPO / "config/config.yaml")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "airetrain.plan.planner" in imported and "snakemake.workflow" in imported   # the probe saw the parse
    assert not [m for m in imported if m == "torch" or m.startswith("torch.")]


def test_the_command_line_imports_no_config_validator_before_its_command_asks():
    """Every rule and job runs `airetrain <step>` (launch, stage, health-node, ...): the command line itself
    imports neither jsonschema (the config's validation) nor torch, pandas or optuna; a command imports what
    it needs when it runs."""
    out = subprocess.run([sys.executable, "-c", "import sys, airetrain.cli; print(sorted(m for m in "
                          "('jsonschema', 'torch', 'pandas', 'optuna', 'snakemake') if m in sys.modules))"],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"
