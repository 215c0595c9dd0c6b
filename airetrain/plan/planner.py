"""Resolve each run into a plan: layout, resources, batch maths, launch arguments.

Everything that can be refused is refused here, before any job is submitted, with a message naming
the key and the fix (refusals.py). The plan is the single source of every later step's resources:
the rules read it, the launcher reads it, the trainer reads it.

    plan_run       one run: its layout, request and refusals (layout.py, request.py, refusals.py)
    plan_all       every run of a config in one process, all refusals reported together
    plan_workflow  the plans of one Snakemake parse, on the submit host or inside a job
    plan_rung      a tuned run's trial, trained to a rung: planned from the trial's file, once the study wrote it
"""
from __future__ import annotations

import json
import logging
import os
from datetime import datetime
from pathlib import Path

from ..catalog import prepared
from ..environment import gives_batch, job_env
from ..cluster.hardware import memory_budget_gb
from ..errors import ConfigError
from ..text import did_you_mean
from ..quota import dataset_size
from ..records import Minutes, Plan, PlanRoots, RecordError, read_record
from ..roots import Root, durable_root, run_dir
from ..run_config import RunConfig, Settings
from ..tracking.registry import TRACKERS
from ..search_space import parse_rung, rung_name, trial_config, trial_file, trial_name
from . import config as cfg, layout, refusals, search, sweep
from .request import slurm_request, torchrun_args
from .rightsize import measured_requests

log = logging.getLogger("airetrain.plan")


def plan_run(name: str, run: RunConfig, settings: Settings, scratch: Root, env=None,
             planned: Plan | None = None) -> Plan:
    """The run's plan, or ConfigError listing every reason it cannot run. planned: its plan.json from
    an earlier parse, whose right-sized requests it keeps."""
    env = os.environ if env is None else env
    cfg.check_name(name)
    problems: list[str] = []
    site = settings.site
    run = site_filled(run, site)
    nodes, nproc = layout.nodes_and_ranks(name, run, site, problems)
    device = run.device if run.device != "auto" else ("cuda" if run.gpus else "cpu")
    cpus_per_rank, cpus_per_node, mem_gb_per_node = layout.per_node(name, run, site, nproc, problems)
    if run.evaluate:   # no optimizer step: its global batch is one forward pass of every rank
        run = run.replace(batch=run.batch.replace(global_=run.batch.per_device * nodes * nproc))
    # a script that is not given the batch chooses its own: its batch maths is not checked
    checked = problems if not run.train.script or gives_batch(run.train.args) else []
    batch = layout.batch_maths(name, run, nodes * nproc, checked)
    refusals.limits(name, run, site, problems)
    dataset = refusals.storage(name, run, settings, scratch, env, problems)
    # Not for the datasets the workflow writes itself: their files.json appears after the first
    # plan, and the plan must come out the same in every later parse (a changed plan reruns the run).
    size = None if run.data.name in prepared() else dataset_size(dataset)
    warnings = refusals.dataset(name, run, site, dataset, size, problems)
    account = refusals.account(name, run, env, problems)
    warnings += refusals.trainer(name, run, device, problems)
    refusals.profile(name, run, nodes * nproc, problems)
    warnings += refusals.tracking(name, run, site, problems)
    search.refusals(name, run, settings, problems)
    script = refusals.script(name, run, problems)
    refusals.refuse(name, problems)

    durable = run_dir(scratch.path, name)
    plan = Plan(
        run=name, device=device, backend="nccl" if device == "cuda" else "gloo", gpus=run.gpus, nodes=nodes,
        nproc_per_node=nproc, world_size=nodes * nproc,
        # auto is decided when plan.json is written (strategy.py); a script chooses its own
        strategy="script" if script else run.strategy,
        activation_checkpointing=run.activation_checkpointing is True, memory_estimate=None, warnings=warnings,
        precision=run.precision, batch=batch, cpus_per_rank=cpus_per_rank, cpus_per_node=cpus_per_node,
        mem_gb_per_node=mem_gb_per_node, time_min=Minutes(**run.time_min.to_dict(), total=run.time_min.total),
        roots=PlanRoots(scratch.path, scratch.source, settings.roots.tmp_shared),   # the fast root: in the job
        dataset=dataset, dataset_size=size,
        fast_root_quota={"max_files": site.fast_root_max_files, "max_gb": site.fast_root_max_gb},
        durable_dir=durable, checkpoints_dir=durable / "checkpoints", results_dir=Path("results") / name,
        slurm=slurm_request(run, nodes, nproc, cpus_per_node, mem_gb_per_node, account),
        env=job_env(run, nodes, cpus_per_rank, device, str(durable)), script=script, config=run,
        right_sized=None, forecast=None, torchrun=torchrun_args(nodes, nproc, run.checkpoint.max_restarts))
    if run.resources == "measured":
        plan = _right_sized(plan, settings, scratch, (planned.right_sized if planned else None))
    return plan


def site_filled(run: RunConfig, site) -> RunConfig:
    """The run with what its config leaves to the site filled in: memory_budget_gb, the site GPU's from the GPU
    table (None: not known), and the links' all-reduce floor. The same in every parse, so a run's plan and
    fingerprint stay the same."""
    if run.memory_budget_gb is None:
        run = run.replace(memory_budget_gb=memory_budget_gb(site.gpu_type))
    if run.health.allreduce_floor_gbps is None and site.allreduce_floor_gbps is not None:
        run = run.replace(health=run.health.replace(allreduce_floor_gbps=site.allreduce_floor_gbps))
    return run


def _right_sized(plan: Plan, settings: Settings, scratch: Root, earlier: dict | None) -> Plan:
    """resources: measured: the requests earlier runs of this profile used (rightsize.py); earlier:
    those it was planned with before, which stand while its profile is the same."""
    requests, warning = measured_requests(plan, settings.site, scratch.path, earlier)
    if warning:
        plan = plan.replace(warnings=[*plan.warnings, warning])
    if not requests:
        return plan
    run, nproc = plan.config, plan.nproc_per_node
    cpus_per_rank, mem_gb_per_node, minutes = plan.cpus_per_rank, plan.mem_gb_per_node, plan.time_min
    if "cpus_per_rank" in requests:
        cpus_per_rank = requests["cpus_per_rank"]["value"]
    if "mem_gb_per_node" in requests:
        mem_gb_per_node = requests["mem_gb_per_node"]["value"]
    if "time_min" in requests:
        steps = {"stage": minutes.stage, "train": minutes.train, "promote": minutes.promote,
                 **requests["time_min"]["value"]}
        minutes = Minutes(**steps, total=sum(steps.values()))
    return plan.replace(
        cpus_per_rank=cpus_per_rank, cpus_per_node=cpus_per_rank * nproc, mem_gb_per_node=mem_gb_per_node,
        time_min=minutes, right_sized=requests,
        slurm=slurm_request(run, plan.nodes, nproc, cpus_per_rank * nproc, mem_gb_per_node, plan.slurm.account),
        env=job_env(run, plan.nodes, cpus_per_rank, plan.device, str(plan.durable_dir)))


def forecast_run(name: str, run: RunConfig, settings: Settings, scratch: Root, env=None) -> list[dict]:
    """The run's layouts (forecast.gpus, else its own gpus) forecast now: start, duration, finish."""
    from ..rundir.history import everything
    from .forecast import layouts

    refusals.forecast(name, run)
    return layouts(run.forecast.gpus or [run.gpus],
                   lambda gpus: plan_run(name, run.replace(gpus=gpus), settings, scratch, env),
                   everything(scratch.path), env if env is not None else os.environ)


def _chosen_layout(name: str, run: RunConfig, settings: Settings, scratch: Root, env, planned: Plan | None,
                   forecast_now: bool) -> Plan:
    """forecast.choose: earliest_finish: the plan of the layout that finishes first. A run keeps the
    layout it was planned with while its config is the same: the forecast moves with the queue, and
    the plan must come out the same in every later parse (inside each job too)."""
    refusals.forecast(name, run)
    if planned and planned.forecast and planned.config == run.replace(gpus=planned.gpus):
        return plan_run(name, planned.config, settings, scratch, env, planned).replace(forecast=planned.forecast)
    if not forecast_now:
        raise ConfigError(f"run {name!r}: forecast.choose, but its plan.json with the chosen layout is missing "
                          "inside the job: plan the workflow on the submit host (snakemake writes it first)")
    from .forecast import choice

    at = datetime.now().astimezone()
    rows = forecast_run(name, run, settings, scratch, env)
    best, why = choice(rows)
    plan = plan_run(name, run.replace(gpus=best["gpus"]), settings, scratch, env, planned)
    return plan.replace(forecast={"at": at.isoformat(timespec="seconds"), "chosen_gpus": best["gpus"],
                                  "configured_gpus": run.gpus, "why": why, "layouts": rows})


def _planned(results: str | Path | None, name: str) -> Plan | None:
    """The run's plan.json from an earlier parse (None: there is none, or it cannot be read)."""
    try:
        return read_record(Path(results) / name / "plan.json", Plan) if results is not None else None
    except (OSError, ValueError, RecordError):
        return None


def plan_all(config: dict, env=None, scratch: Root | None = None,
             results: str | Path | None = None, forecast_now: bool = True) -> PlansWithTrials:
    """Plan every run in one process; all refusals are reported together.

    scratch: the durable root already decided where the workflow was planned (see plan_workflow);
    without it the root is resolved here, from the config and the environment. results: where
    each run's plan.json is: a right-sized run keeps the requests it was planned with, and a run
    whose layout a forecast chose keeps that layout. forecast_now: False inside a job, which never
    asks the scheduler. A tuned run's trials are planned when first looked up (plan/search.py)."""
    settings, runs = cfg.resolve(config)
    scratch = scratch or durable_root(settings.roots.scratch, env)
    plans, problems = {}, []
    for name, run in runs.items():
        run = site_filled(run, settings.site)
        try:
            planned = _planned(results, name)
            plans[name] = _chosen_layout(name, run, settings, scratch, env, planned, forecast_now) \
                if run.forecast.choose else plan_run(name, run, settings, scratch, env, planned)
        except ConfigError as e:
            problems.append(str(e))
    if problems:
        raise ConfigError("\n".join(problems))
    groups = sweep.groups(runs)
    points = cfg.sweep_points(config, runs)
    plans = {name: plan.replace(group=groups[name], sweep=points.get(name, {}), evaluates=_evaluates(plan, plans),
                                tune_keys=list(plan.config.tune.space) if plan.config.tune else None)
             for name, plan in plans.items()}
    site_warnings = slurm_disagrees(plans, settings, env) if forecast_now else []   # on the submit host only
    for warning in [w for p in plans.values() for w in p.warnings] + plan_warnings(plans, settings) + site_warnings:
        log.warning(warning)
    return PlansWithTrials(plans, settings, results if results is not None else "results")


def _evaluates(plan: Plan, plans: dict[str, Plan]) -> dict | None:
    """What an evaluation run's plan step checks its model and data against: its source's data."""
    if plan.config.evaluate is None:
        return None
    source = plans[plan.config.evaluate["run"]]
    return {**plan.config.evaluate, "data": source.config.data.to_dict(),
            "dataset": str(source.dataset) if source.dataset else None}


def plan_workflow(config: dict, in_job: bool, results: str | Path = "results") -> PlansWithTrials:
    """The plans of a Snakemake parse: on the submit host from the config and the environment; inside a
    job with the durable root of the newest results/<run>/plan.json (written by this invocation's
    plan rules, which run on the submit host before any job)."""
    return plan_all(config, scratch=planned_scratch(results) if in_job else None, results=results,
                    forecast_now=not in_job)


def planned_scratch(results: str | Path) -> Root | None:
    """The durable root recorded in the newest readable results/<run>/plan.json, if there is one.

    Snakemake parses the workflow again inside every job, where the environment differs (SLURM_JOB_ID,
    the job's own TMPDIR, perhaps another $SCRATCH): the job must plan with the root the submit host
    decided, or it looks for the dataset somewhere else and no durable copy lands where it was planned."""
    import json

    for path in sorted(Path(results).glob("*/plan.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            roots = json.loads(path.read_text())["roots"]
        except (OSError, ValueError, KeyError):
            continue
        return Root(Path(roots["scratch"]), roots["scratch_source"])
    return None


def slurm_disagrees(plans: dict[str, Plan], settings: Settings, env=None) -> list[str]:
    """Where SLURM answers (a login node): a GPU run on a partition the cluster does not have is refused, naming
    the ones it has (a CPU run warned about: it may run with the local executor); and a warning for each
    partition of the GPU runs whose facts differ from the config's site: (a plan with another cluster's facts
    is wrong before anything runs)."""
    import shutil

    from ..cluster.site_facts import disagreements, read_site
    from ..cluster.slurm import partitions

    if not shutil.which("sinfo") or (known := partitions(env)) is None:
        return []
    out, problems = [], []
    for name, plan in plans.items():
        missing = [p for p in plan.slurm.partition.split(",") if p not in known]
        if missing and plan.gpus:
            problems.append(f"runs.{name}.slurm.partition = {plan.slurm.partition!r}: this cluster has no "
                            f"partition {', '.join(missing)}{did_you_mean(missing[0], known)}; its partitions: "
                            f"{', '.join(known)}")
        elif missing:
            out.append(f"run {name}: this cluster has no partition {', '.join(missing)} (slurm.partition); its "
                       f"partitions: {', '.join(known)}. The local executor runs it; --executor slurm would not")
    if problems:
        raise ConfigError("\n".join(problems))
    for partition in sorted({p.slurm.partition.split(",")[0] for p in plans.values() if p.gpus}):
        read = read_site(partition, env=env)[0]
        if differs := disagreements(settings.site.to_dict(), read):
            out.append(f"site: disagrees with SLURM's partition {partition}: {'; '.join(differs)} (airetrain site "
                       f"--partition {partition} --write config/site.yaml writes SLURM's; give it after the config)")
    return out


def datasets_to_prepare(plans: dict[str, Plan]) -> dict[str, str]:
    """{path: built-in dataset name} of the datasets the workflow writes before staging: once each."""
    return {str(p.dataset): p.config.data.name for p in sorted(plans.values(), key=lambda p: p.run)
            if p.config.data.name in prepared()}


def plan_warnings(plans: dict[str, Plan], settings: Settings) -> list[str]:
    """What will work, but not as the user may expect."""
    warnings = []
    from ..rundir.capture import changed

    for name, plan in plans.items():
        if files := changed(plan):
            warnings.append(f"run {name}: code changed since this run started ({', '.join(files[:3])}"
                            f"{', ...' if len(files) > 3 else ''}): it keeps its captured code until it finishes; "
                            f"airetrain restart {name} trains it with the new code")
    configs = {name: plan.config for name, plan in plans.items()}
    for sink in TRACKERS.values():   # what one tracker says of several runs together
        warnings += sink.across_runs(configs)
    demand = sum(p.gpus for p in plans.values())
    limit = settings.site.max_gpus_per_user
    if demand > limit:
        warnings.append(f"these {len(plans)} runs ask for {demand} GPUs together, over the per-user limit of "
                        f"{limit} (site.max_gpus_per_user): at most {limit} GPUs run at once, the rest queue")
    return warnings


class PlansWithTrials(dict):
    """{run: plan} of a parse, where the rung of a trial (<tune>-t<NNN>-e<epochs>) is planned when first
    looked up, from its trial's file: the rules' resources and commands find it as any run's."""

    def __init__(self, plans: dict[str, Plan], settings: Settings, results: str | Path = "results"):
        super().__init__(plans)
        self.settings, self.results = settings, results
        self.tunes = {name for name, plan in plans.items() if plan.config.tune}

    def __missing__(self, name: str) -> Plan:
        rung = parse_rung(name, self.tunes)
        if rung is None:
            raise KeyError(name)
        self[name] = plan = plan_rung(self[rung[0]], *rung[1:], self.settings, self.results)
        return plan


def plan_rung(tuned: Plan, number: int, epochs: int, settings: Settings, results: str | Path = "results") -> Plan:
    """The plan of a trial's rung: the tuned run's config with the trial's parameters, trained to epochs, as
    the trial's run (its checkpoints, lock and trackers) with a results folder of the rung's own."""
    path = trial_file(tuned.run, number, results)
    try:
        params = json.loads(path.read_text())["params"]
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"trial {number} of {tuned.run}: its file {path} cannot be read ({e}); the study's "
                          "step writes it before the trial is planned") from None
    name = trial_name(tuned.run, number)
    run = RunConfig.from_dict(trial_config(tuned.config.to_dict(), params, epochs), name)
    scratch = Root(Path(tuned.roots.scratch), tuned.roots.scratch_source)
    plan = plan_run(name, run, settings, scratch)
    return plan.replace(results_dir=Path(results) / rung_name(name, epochs), group=name, sweep=params)

