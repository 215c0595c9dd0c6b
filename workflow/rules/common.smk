import json
import os
import re
import sys

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

# The package is this checkout's, here and in every job (local, SLURM, --use-conda), installed or
# not: first on sys.path for this parse, then first on PYTHONPATH for the jobs, which inherit it.
sys.path.insert(0, workflow.basedir)

from airetrain.plan.interpreter import put_package_first

put_package_first(workflow.basedir)

from airetrain.errors import ConfigError
from airetrain.plan.commands import command, run_paths
from airetrain.plan.interpreter import rule_python
from airetrain.plan.planner import datasets_to_prepare, plan_workflow
from airetrain.plan.overview import format_table
from airetrain.typed import to_dict

# Plan every run in this one process; refusals stop the workflow before anything is submitted.
# Inside a job (Snakemake parses this file again there) the plan keeps the submit host's roots.
try:
    PLANS = plan_workflow(config, in_job=not workflow.is_main_process)
    # the rules' interpreter: Snakemake's own, never whatever `python` an unactivated shell finds first
    PYTHON = rule_python(DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method)
except ConfigError as e:
    raise WorkflowError(f"airetrain: {e}") from None
if workflow.is_main_process:
    logger.info(f"airetrain plan:\n{format_table(PLANS)}")

RUNS = list(PLANS)
TRAIN_SCRIPT = os.path.join(workflow.basedir, "scripts", "train.py")
PREPARED_DATASETS = datasets_to_prepare(PLANS)


wildcard_constraints:
    run="|".join(map(re.escape, RUNS)),


def get_final_outputs():
    return [
        *expand("results/{run}/checkpoint.json", run=RUNS),
        "results/report/efficiency.csv",
        "results/report/efficiency.md",
        "results/report/efficiency.html",
    ]


def slurm(wildcards, key):
    """A SLURM resource of the run, from its plan."""
    return getattr(PLANS[wildcards.run].slurm, key)


def get_dataset(wildcards):
    """The run's dataset directory on scratch, an input of its stage step (none: nothing to stage)."""
    dataset = PLANS[wildcards.run].dataset
    return str(dataset) if dataset else []


def get_init(wildcards):
    """What the run's model.init_from names, an input of its train step: another run's checkpoint.json
    (so that run is trained and promoted first, and retraining it retrains this one), or a file."""
    init = PLANS[wildcards.run].config.model.init_from
    if isinstance(init, dict):
        return f"results/{init['run']}/checkpoint.json"
    return init or []


def partition(wildcards):
    return PLANS[wildcards.run].slurm.partition


def account(wildcards):
    """The run's account if the config names one; else the profile's default or $SBATCH_ACCOUNT."""
    return PLANS[wildcards.run].slurm.account or ""


def minutes(step):
    return lambda wildcards: getattr(PLANS[wildcards.run].time_min, step)
