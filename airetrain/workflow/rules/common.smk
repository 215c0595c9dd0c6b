import json
import os
import re
import shlex
import sys

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

# The package is the one this workflow belongs to (<package>/workflow/rules/ is this file's folder).
# From a source checkout, installed or not, it goes first on sys.path for this parse and first on
# PYTHONPATH for the jobs (local, SLURM, --use-conda), which inherit it; an installed one is already there.
PACKAGE_PARENT = os.path.abspath(os.path.join(str(workflow.current_basedir), "..", "..", ".."))
if os.path.exists(os.path.join(PACKAGE_PARENT, "pyproject.toml")):
    sys.path.insert(0, PACKAGE_PARENT)
    from airetrain.plan.interpreter import put_package_first

    put_package_first(PACKAGE_PARENT)

from airetrain.errors import ConfigError
from airetrain.plan.step_commands import command, run_paths
from airetrain.plan.interpreter import rule_python
from airetrain.rundir.memory_raises import request_mb as memory_request_mb
from airetrain.plan.planner import datasets_to_prepare, plan_workflow
from airetrain.plan.overview import format_table
from airetrain.plan.packing import pack_request, packs, search_groups
from airetrain.profiles import account_problem, unquoted
from airetrain.cluster.slurm import training_job
from airetrain.rundir.run_log import LOCK as TRAINER_LOCK
from airetrain.search_space import rung_name, slots, step_path, tune_folder, wave_path
from airetrain.typed import to_dict
from airetrain.workflow import TRAIN_SCRIPT

# Plan every run in this one process; refusals stop the workflow before anything is submitted.
# Inside a job (Snakemake parses this file again there) the plan keeps the submit host's roots.
try:
    PLANS = plan_workflow(config, in_job=not workflow.is_main_process)
    # the rules' interpreter: Snakemake's own, never whatever `python` an unactivated shell finds first
    PYTHON = rule_python(DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method)
except ConfigError as e:
    raise WorkflowError(f"airetrain: {e}") from None
# The profile's default-resources slurm_account: the rules' own slurm_account resource would hide it.
_default = (workflow.resource_settings.default_resources or {}).get("slurm_account")
PROFILE_ACCOUNT = unquoted(getattr(_default, "raw", None))
if problem := account_problem(PROFILE_ACCOUNT, "the profile's default-resources"):
    raise WorkflowError(f"airetrain: {problem}")
if workflow.is_main_process:
    logger.info(f"airetrain plan:\n{format_table(PLANS, PLANS.settings.site)}")

# A tuned run trains no weights itself: its trials do, each rung a run <tune>-t<NNN>-e<epochs> (rules/tune.smk).
TUNES = sorted(PLANS.tunes)
RUNS = [name for name in PLANS if name not in PLANS.tunes]
PREPARED_DATASETS = datasets_to_prepare(PLANS)
SETTINGS_JSON = json.dumps(to_dict(PLANS.settings), sort_keys=True)


# Runs that share one allocation (run key pack): each pack's rule (rules/pack.smk) stages, trains and
# promotes its runs; the other runs' rules do not match them.
PACKS = packs({name: PLANS[name] for name in RUNS}, PLANS.settings.site)
PACKED = {run for members in PACKS.values() for run in members}


# A search's slots in groups that take each step together (rules/tune.smk): a group of several is a search
# that packs, its rungs of a step trained in one allocation; its rungs' own rules do not match them.
SLOT_GROUPS = {tune: search_groups(PLANS[tune], PLANS.settings.site) for tune in TUNES}
IN_WAVES = [tune for tune in TUNES if len(SLOT_GROUPS[tune][0]) > 1]


def run_pack_command(runs):
    """`airetrain run-pack` of runs sharing one allocation (a pack's, or a search's wave)."""
    return shlex.join([str(PYTHON), "-m", "airetrain", "run-pack", "--runs", *runs, "--python", str(PYTHON),
                       "--script", str(TRAIN_SCRIPT), "--project-dir", os.getcwd()])


def run_names(packed=True):
    """The run wildcard's values: every run, or only those not packed (a search in waves packs its rungs)."""
    names = [*(r for r in RUNS if packed or r not in PACKED), *TUNES]
    tunes = [t for t in TUNES if packed or t not in IN_WAVES]
    trials = [f"(?:{'|'.join(map(re.escape, tunes))})-t[0-9][0-9][0-9]+-e[0-9]+"] if tunes else []
    return "|".join([*map(re.escape, names)] + trials)


UNPACKED_RUN = run_names(packed=False)


wildcard_constraints:
    run=run_names(),
    tune="|".join(map(re.escape, TUNES)) or "(?!)",
    slot="[0-9]+",
    step="[0-9]+",
    group="[0-9]+",
    wave="[0-9]+",


def get_final_outputs():
    return [
        *expand("results/{run}/checkpoint.json", run=RUNS),
        *expand("results/{tune}/tune.csv", tune=TUNES),
        "results/report/efficiency.csv",
        "results/report/efficiency.md",
        "results/report/efficiency.html",
    ]


def slurm(wildcards, key):
    """A SLURM resource of the run, from its plan."""
    return getattr(PLANS[wildcards.run].slurm, key)


def train_mem_mb(wildcards, attempt):
    """The run's memory per node: its plan's, or more where a job of it ran out (rundir/memory_raises.py)."""
    return memory_request_mb(PLANS[wildcards.run], PLANS.settings.site, attempt)


def get_health(wildcards):
    """The run's node check, an input of its stage step (none: health.preflight is off)."""
    return run_paths(wildcards.run)["health"] if PLANS[wildcards.run].config.health.preflight else []


def get_dataset(wildcards):
    """The run's dataset directory on scratch, an input of its stage step (none: nothing to stage)."""
    return dataset_of(wildcards.run)


def dataset_of(run):
    dataset = PLANS[run].dataset
    return str(dataset) if dataset else []


def get_init(wildcards):
    """What the run's model.init_from names, an input of its train step: another run's checkpoint.json
    (so that run is trained and promoted first, and retraining it retrains this one), or a file."""
    init = PLANS[wildcards.run].config.model.init_from
    if isinstance(init, dict):
        return f"results/{init['run']}/checkpoint.json"
    return init or []


def train_extra(wildcards):
    return after_training([wildcards.run])


def after_training(runs):
    """The runs' own sbatch options; on the submit host, also a dependency on each job that a Snakemake before
    this one submitted and that still trains one of them (its trainer lock names it): the new job waits in the
    queue, holding no GPU, starts when those end, and each run resumes where it stopped or finds itself trained."""
    jobs = [training_job(PLANS[run].durable_dir / TRAINER_LOCK) for run in runs] if workflow.is_main_process else []
    jobs = sorted(set(filter(None, jobs)))
    return PLANS[runs[0]].slurm.extra + (f" --dependency=afterany:{':'.join(jobs)}" if jobs else "")


def partition(wildcards):
    return PLANS[wildcards.run].slurm.partition


def account(wildcards):
    return run_account(wildcards.run)


def run_account(run):
    """The run's account (its config's, else $SBATCH_ACCOUNT), else the profile's, else none (sbatch's default)."""
    return PLANS[run].slurm.account or PROFILE_ACCOUNT or ""


def minutes(step):
    return lambda wildcards: getattr(PLANS[wildcards.run].time_min, step)


# A tuned run's search (rules/tune.smk): the chain of each slot's steps, or of each group's waves.
def tune_parallel(tune):
    return slots(PLANS[tune].config, PLANS.settings.site.max_gpus_per_user)


def step_decision(tune, slot, step):
    """The decision of a slot's step. A step decided is read as any file (a step taken again decides the same:
    tune/steps.py); only the first one not decided yet is Snakemake's checkpoint to wait on. Registering
    every step of every chain as a checkpoint makes each DAG update walk them all again."""
    path = str(step_path(tune_folder(tune), slot, step))
    if not os.path.exists(path):
        path = checkpoints.tune_step.get(tune=tune, slot=slot, step=step).output[0]
    with open(path) as f:
        return json.load(f)


def previous_rung(wildcards):
    """The rung the previous step of this slot trained (its promoted checkpoint), which this step tells the study."""
    step = int(wildcards.step)
    if step == 0:
        return []
    decision = step_decision(wildcards.tune, wildcards.slot, step - 1)
    return [] if decision.get("done") else run_paths(rung_name(decision["trial"], decision["epochs"]))["checkpoint"]


def slot_steps(wildcards):
    """A slot's steps, up to the one that found every trial asked. One slot per call: Snakemake waits on the
    first step an input function finds missing, and the slots must not wait on each other."""
    files, step = [], 0
    while True:
        decision = step_decision(wildcards.tune, wildcards.slot, step)
        files.append(str(step_path(tune_folder(wildcards.tune), wildcards.slot, step)))
        if decision.get("done"):
            return files
        step += 1


def every_slot(wildcards):
    """Each slot's chain, or each group's where the search goes in waves."""
    tune = wildcards.tune
    if tune in IN_WAVES:
        return expand("results/{tune}/tune/group{group}.txt", tune=tune, group=range(len(SLOT_GROUPS[tune])))
    return expand("results/{tune}/tune/slot{slot}.txt", tune=tune, slot=range(tune_parallel(tune)))


def wave_decision(tune, group, wave):
    """A wave's rungs (and whether the group is done); as step_decision, only the first wave not decided is waited on."""
    path = str(wave_path(tune_folder(tune), group, wave))
    if not os.path.exists(path):
        path = checkpoints.tune_wave.get(tune=tune, group=group, wave=wave).output[0]
    with open(path) as f:
        return json.load(f)


def previous_wave(wildcards):
    """The previous wave of this group trained (its marker): what this wave tells the study."""
    wave = int(wildcards.wave)
    if wave == 0:
        return []
    return f"results/{wildcards.tune}/tune/group{wildcards.group}/wave{wave - 1}.trained"


def wave_rungs(wildcards):
    return wave_decision(wildcards.tune, wildcards.group, wildcards.wave)["rungs"]


def wave_request(wildcards):
    """The allocation of a wave's rungs (plan/packing.py's pack_request)."""
    return pack_request([PLANS[rung] for rung in wave_rungs(wildcards)])


def group_waves(wildcards):
    """A group's waves, up to the one that found every trial asked (as slot_steps)."""
    files, wave = [], 0
    while True:
        decision = wave_decision(wildcards.tune, wildcards.group, wave)
        files.append(str(wave_path(tune_folder(wildcards.tune), wildcards.group, wave)))
        if decision["done"]:
            return files
        wave += 1
