"""What must not import torch: the planning, staging and report code, and Snakemake's own process
(the Snakefile's parse on a login node, in every job, for every `snakemake -n`)."""
import subprocess
import sys

from conftest import REPO, SNAKEMAKE

PROBE = "import sys, {modules}; print(sorted(m for m in ('torch', 'snakemake') if m in sys.modules))"


def test_planning_staging_and_reporting_import_no_torch_and_the_package_no_snakemake():
    modules = ", ".join(f"airetrain.{m}" for m in (
        "plan", "stage", "report.sacct", "report.table", "report.advice", "report.render", "report.plots",
        "roots", "units", "interpreter", "sbatch", "launch", "cli"))
    out = subprocess.run([sys.executable, "-c", PROBE.format(modules=modules)], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.strip() == "[]"


def test_snakemakes_parse_of_the_workflow_imports_no_torch(tmp_path):
    """-X importtime lists every module the process imported, on stderr."""
    proc = subprocess.run([sys.executable, "-X", "importtime", SNAKEMAKE, "-s", str(REPO / "Snakefile"),
                           "-d", str(tmp_path), "-n", "--configfile", str(REPO / "config/config.yaml")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "airetrain.plan" in imported and "snakemake.workflow" in imported   # the probe saw the parse
    assert not [m for m in imported if m == "torch" or m.startswith("torch.")]
