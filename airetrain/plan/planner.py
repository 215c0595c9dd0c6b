"""Resolve each run into a plan: layout, resources, batch maths, launch arguments.

Everything that can be refused is refused here, before any job is submitted, with a
message naming the key and the fix. The plan is the single source of every later
step's resources (the rules read it, the launcher reads it, the trainer reads it).
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path

from . import config as cfg
from ..catalog import default_path, prepared
from ..errors import ConfigError
from ..environment import job_env, torchrun_args
from .rightsize import measured_requests
from ..roots import Root, durable_root, is_under, run_dir
from ..quota import dataset_size, pack_command, quota_messages
from ..shards import INDEX

log = logging.getLogger("airetrain.plan")

# Per-rank defaults. With GPUs: Aire's share of a node per GPU (24 cores, ~250 GB over 3 GPUs).
DEFAULT_CPUS_PER_RANK = {"gpu": 8, "cpu": 1}
DEFAULT_MEM_GB_PER_RANK = {"gpu": 80, "cpu": 2}


def _layout(name: str, run: dict, site: dict, problems: list[str]) -> tuple[int, int]:
    """(nodes, ranks per node) for the run, or problems explaining why not."""
    gpus, per_node = run["gpus"], site["gpus_per_node"]
    if gpus == 0:
        if run["device"] == "cuda":
            problems.append(f"runs.{name}.device = 'cuda' needs gpus > 0; set gpus, or device: cpu")
        if run["nodes"] not in (None, 1):
            problems.append(f"runs.{name}.nodes = {run['nodes']}: CPU runs (gpus: 0) use one node; remove nodes")
        if run["nproc_per_node"] not in (None, run["processes"]):
            problems.append(
                f"runs.{name}.nproc_per_node = {run['nproc_per_node']} differs from processes = "
                f"{run['processes']}; set only processes for CPU runs"
            )
        return 1, run["processes"]

    if gpus <= per_node:
        nodes = 1
    elif gpus % per_node:
        lower, upper = gpus // per_node * per_node, math.ceil(gpus / per_node) * per_node
        problems.append(
            f"runs.{name}.gpus = {gpus} is impossible: a node has {per_node} GPUs, so more than {per_node} "
            f"must be whole nodes (gres gpu:{gpus} on one node does not exist); ask for gpus: {lower} or {upper}"
        )
        return 1, per_node
    else:
        nodes = gpus // per_node
    nproc = gpus // nodes
    if run["nodes"] is not None and run["nodes"] != nodes:
        if run["nodes"] * per_node < gpus:
            why = f"{gpus} GPUs do not fit on {run['nodes']} node(s) of {per_node} GPUs"
        else:
            why = f"{gpus} GPUs take {nodes} node(s) with {nproc} GPUs each"
        problems.append(f"runs.{name}.nodes = {run['nodes']} is impossible: {why}; set nodes: {nodes} or remove it")
    if run["nproc_per_node"] is not None and run["nproc_per_node"] != nproc:
        problems.append(
            f"runs.{name}.nproc_per_node = {run['nproc_per_node']} differs from the {nproc} GPUs per node: "
            f"each GPU needs exactly one process; set nproc_per_node: {nproc} or remove it"
        )
    return nodes, nproc


def _batch(name: str, run: dict, world: int, problems: list[str]) -> dict:
    glob, per_device = run["batch"]["global"], run["batch"]["per_device"]
    step = per_device * world
    if glob % step == 0:
        return {"global": glob, "per_device": per_device, "grad_accum": glob // step}
    lower, upper = max(step, glob // step * step), math.ceil(glob / step) * step
    fixes = [f"batch.global: {v}" for v in sorted({lower, upper})]
    if glob % world == 0:
        per_rank = glob // world
        divisors = [d for d in range(1, per_rank + 1) if per_rank % d == 0]
        near = sorted(divisors, key=lambda d: abs(d - per_device))[:2]
        fixes += [f"batch.per_device: {d}" for d in sorted(near)]
    problems.append(
        f"runs.{name}.batch.global = {glob} is not per_device ({per_device}) x world size ({world}) x "
        f"gradient-accumulation steps; use " + " or ".join(fixes)
    )
    return {"global": glob, "per_device": per_device, "grad_accum": None}


def _dataset_path(name: str, data: dict, scratch: Root, problems: list[str]) -> Path | None:
    """The directory to stage, or None when there is nothing to stage (synthetic data)."""
    if data["name"] == "synthetic":
        return None
    path = data["path"] or default_path(data["name"])
    if path is None:
        if data["name"] in ("npy", "image_folder"):
            what = "the shard directory" if data["name"] == "npy" else "the image folder, or its packed shards"
            problems.append(f"runs.{name}.data.path is required for data.name: {data['name']} ({what})")
        return None
    path = Path(path).expanduser()
    return path if path.is_absolute() else scratch.path / path


def _trainer_checks(name, run, device, problems) -> list[str]:
    """Refusals and warnings about the trainer's options that need no model."""
    if run["strategy"] == "fsdp":
        _fsdp_checks(name, run, problems)
    if run["fsdp_cpu_offload"] and device != "cuda":
        problems.append(f"runs.{name}.fsdp_cpu_offload needs a GPU: without one there is nothing to offload "
                        "from; remove it for CPU runs")
    if run["fsdp_cpu_offload"] and run["strategy"] == "ddp":
        problems.append(f"runs.{name}.fsdp_cpu_offload applies to FSDP only; set strategy: fsdp or remove it")
    if run["channels_last"] and (run["model"]["name"] in ("vit", "gpt") or
                                 (run["model"]["name"] == "unet" and run["model"]["dims"] == 3)):
        problems.append(f"runs.{name}.channels_last applies to 2D convolutional models (small_cnn, resnet18, unet "
                        f"with dims: 2, or your own), not to {run['model']['name']}"
                        + (" with dims: 3" if run["model"]["name"] == "unet" else "") + "; remove it")
    if run["ddp_bucket_mb"] != 25 and run["strategy"] == "fsdp":
        problems.append(f"runs.{name}.ddp_bucket_mb applies to DDP; FSDP reduces per unit: remove it")
    if run["model"]["name"] in ("vit", "gpt") and run["model"]["width"] % run["model"]["heads"]:
        problems.append(f"runs.{name}.model.heads = {run['model']['heads']} does not divide model.width = "
                        f"{run['model']['width']}")
    warnings = []
    if device == "cuda":
        if run["model"]["width"] % 8:
            warnings.append(f"run {name}: model.width = {run['model']['width']} is not a multiple of 8: "
                            "tensor cores run slower on such shapes")
        if run["batch"]["per_device"] % 8:
            warnings.append(f"run {name}: batch.per_device = {run['batch']['per_device']} is not a multiple of 8: "
                            "tensor cores run slower on such shapes")
    elif run["compile"]:
        warnings.append(f"run {name}: compile is ignored on CPU")
    hang, job_min = run["train"]["hang_timeout_min"], sum(run["time_min"].values())
    if hang and hang >= job_min:
        warnings.append(f"run {name}: train.hang_timeout_min = {hang} is not shorter than the job ({job_min} min): "
                        "the watchdog cannot fire before the time limit")
    return warnings


def _fsdp_checks(name, run, problems) -> None:
    if run["precision"] == "fp16":
        problems.append(f"runs.{name}.precision = 'fp16' with FSDP is not supported (it needs a sharded "
                        "GradScaler); use precision: bf16, which needs no scaler")


def resolve_strategy(plan: dict) -> dict:
    """The plan with `strategy: auto` decided from the memory estimate (plan.json holds this).

    Kept out of plan_run: the estimate imports torch, which would slow every `snakemake -n`.
    """
    from ..train import estimate

    run = plan["config"]
    if plan["strategy"] == "fsdp" and plan["device"] == "cuda":   # asked for: the estimate says how it shards
        memory = estimate.estimate(run, estimate.dataset_meta(run["data"], plan["dataset"]), plan["world_size"],
                                   plan["batch"]["per_device"], plan["dataset"])
        return {**plan, "memory_estimate": {**memory, "decision": "fsdp", "reason": "strategy: fsdp (asked for); "
                                            + memory["reason"]}}
    if plan["strategy"] != "auto":
        return plan
    if plan["device"] == "cpu":
        memory = {"decision": "ddp", "reason": "CPU run: no GPU memory budget applies; DDP"}
    else:
        memory = estimate.estimate(run, estimate.dataset_meta(run["data"], plan["dataset"]), plan["world_size"],
                                   plan["batch"]["per_device"], plan["dataset"])
    problems: list[str] = []
    if memory["decision"] == "fsdp":
        _fsdp_checks(plan["run"], run, problems)
    if problems:
        raise ConfigError(f"run {plan['run']!r} refused after the memory estimate chose FSDP "
                          f"({memory['reason']}):\n  - " + "\n  - ".join(problems))
    return {**plan, "strategy": memory["decision"], "memory_estimate": memory,
            "activation_checkpointing": run["activation_checkpointing"] is True or (
                run["activation_checkpointing"] == "auto" and memory["decision"] == "fsdp")}


def _check_not_home(key: str, path: Path, explicit: bool, env, problems: list[str]) -> None:
    home = env.get("HOME")
    if explicit and home and is_under(path, home):
        problems.append(
            f"{key} = {path} is under $HOME ({home}): $HOME is small, slow NFS and must never hold "
            "datasets or checkpoints; put it on $SCRATCH"
        )


def _script(name: str, run: dict, problems: list[str]) -> dict | None:
    """Script mode's script (absolute, from the working directory) and its arguments, if it exists."""
    if not run["train"]["script"]:
        return None
    path = Path(run["train"]["script"]).expanduser().absolute()
    if not path.is_file():
        problems.append(f"runs.{name}.train.script = {run['train']['script']!r}: no such file ({path})")
    return {"path": str(path), "args": list(run["train"]["args"])}


def _per_node(name: str, run: dict, site: dict, nproc: int, problems: list[str]) -> tuple[int, int, float]:
    """(cores per rank, cores per node, memory GB per node), refused where a node has less."""
    kind = "gpu" if run["gpus"] else "cpu"
    cpus_per_rank = run["cpus_per_rank"] or DEFAULT_CPUS_PER_RANK[kind]
    mem_gb_per_rank = run["mem_gb_per_rank"] or DEFAULT_MEM_GB_PER_RANK[kind]
    cpus_per_node, mem_gb_per_node = cpus_per_rank * nproc, mem_gb_per_rank * nproc
    if cpus_per_node > site["cores_per_node"]:
        problems.append(
            f"runs.{name}.cpus_per_rank = {cpus_per_rank} x {nproc} ranks per node = {cpus_per_node} cores, "
            f"but a node has {site['cores_per_node']}; use cpus_per_rank: {site['cores_per_node'] // nproc}"
        )
    if mem_gb_per_node > site["mem_gb_per_node"]:
        problems.append(
            f"runs.{name}.mem_gb_per_rank = {mem_gb_per_rank} x {nproc} ranks per node = {mem_gb_per_node} GB, "
            f"but a node has {site['mem_gb_per_node']} GB; use mem_gb_per_rank: {int(site['mem_gb_per_node'] // nproc)}"
        )
    return cpus_per_rank, cpus_per_node, mem_gb_per_node


def _limit_checks(name: str, run: dict, site: dict, problems: list[str]) -> None:
    """The partition's limits: GPUs per user, the longest job, and time left to train before the stop."""
    if run["gpus"] > site["max_gpus_per_user"]:
        problems.append(f"runs.{name}.gpus = {run['gpus']} exceeds site.max_gpus_per_user = "
                        f"{site['max_gpus_per_user']}: the job would never start; ask for at most that many")
    total_min = sum(run["time_min"].values())
    if total_min > site["max_wall_hours"] * 60:
        problems.append(f"runs.{name}.time_min adds up to {total_min} min, over site.max_wall_hours = "
                        f"{site['max_wall_hours']} h; shorten train (the run resumes from its checkpoint "
                        "when resubmitted)")
    margin = run["checkpoint"]["stop_margin_min"]
    if margin >= total_min:
        problems.append(f"runs.{name}.checkpoint.stop_margin_min = {margin} leaves no time to train in a job of "
                        f"{total_min} min (time_min); lower it or raise time_min.train")
    hang = run["train"]["hang_timeout_min"]
    if hang and hang <= margin:
        problems.append(f"runs.{name}.train.hang_timeout_min = {hang} is not above checkpoint.stop_margin_min = "
                        f"{margin}: a save may take that long without a step, and the watchdog would call it a hang; "
                        "raise it, or set 0 to turn the watchdog off")


def _dataset_checks(name: str, run: dict, site: dict, dataset: Path | None, size: dict | None,
                    problems: list[str]) -> list[str]:
    """The packed format where it is asked for, and the fast root's quotas where the size is known
    (the dataset's index or files.json); warnings returned."""
    warnings: list[str] = []
    if dataset is not None and run["data"]["format"] == "shards" and (size or {}).get("format") != "shards":
        problems.append(f"runs.{name}.data.format is shards, but {dataset} has no shard index ({INDEX}): "
                        f"pack it first: {pack_command(dataset)}")
    elif size is not None:
        refused, slow = quota_messages(dataset, size["files"], size["bytes"], site["fast_root_max_files"],
                                       site["fast_root_max_gb"], packed=size["format"] == "shards")
        problems.extend(f"runs.{name}.data.path: {p}" for p in refused)
        warnings.extend(f"run {name}: {w}" for w in slow)
    return warnings


def _storage_checks(name: str, run: dict, top: dict, scratch: Root, env, problems: list[str]) -> Path | None:
    """The dataset's path on the durable root; nothing durable under $HOME."""
    dataset = _dataset_path(name, run["data"], scratch, problems)
    if dataset is not None:
        data_path = Path(run["data"]["path"] or default_path(run["data"]["name"]))
        _check_not_home(f"runs.{name}.data.path", dataset, data_path.is_absolute() or not scratch.fallback, env,
                        problems)
    _check_not_home("roots.scratch", scratch.path, not scratch.fallback, env, problems)
    if top["roots"]["tmp_shared"]:
        _check_not_home("roots.tmp_shared", Path(top["roots"]["tmp_shared"]), True, env, problems)
    return dataset


def _account(name: str, run: dict, env, problems: list[str]) -> str | None:
    """The run's account, else $SBATCH_ACCOUNT (validated: it reaches sbatch), else none."""
    account = run["slurm"]["account"] or env.get("SBATCH_ACCOUNT") or None
    if not run["slurm"]["account"] and account and not cfg.SLURM_NAME.match(account):
        problems.append(f"$SBATCH_ACCOUNT = {account!r} is not a SLURM account name (letters, digits, '_', '.' "
                        f"and '-'); fix the variable, or set runs.{name}.slurm.account")
    return account


def _mail(slurm: dict) -> str:
    """sbatch's mail options (both validated by the schema: names and an address, nothing a shell reads)."""
    return "".join(f" --mail-{key}={slurm[f'mail_{key}']}" for key in ("type", "user") if slurm[f"mail_{key}"])


def _slurm_request(run: dict, nodes: int, nproc: int, cpus_per_node: int, mem_gb_per_node: float,
                   account: str | None) -> dict:
    return {
        "partition": run["slurm"]["partition"],
        # sbatch reads $SBATCH_ACCOUNT itself, but the executor would otherwise guess one
        "account": account,
        "nodes": nodes,
        "tasks": nodes,
        "cpus_per_task": cpus_per_node,
        "mem_mb": int(mem_gb_per_node * 1024),
        "gres": f"gpu:{nproc}" if run["gpus"] else None,
        # The executor runs a rule that has an `mpi` resource unwrapped in the batch step, so
        # the launcher can start its own `srun` across all nodes. Its MPI checks refuse
        # tasks=1, so one node sets the key with an empty value (same launch path).
        "mpi": "srun" if nodes > 1 else "",
        # a requeued job appends to its log instead of truncating the first run's
        "extra": "--open-mode=append" + (" --requeue" if run["checkpoint"]["requeue"] else "") + _mail(run["slurm"]),
        # its own resource: the executor refuses --qos in slurm_extra (and then waits forever)
        "qos": run["slurm"]["qos"],
    }


def _planned(results: str | Path | None, name: str) -> dict | None:
    """The run's plan.json from an earlier parse (None: there is none, or it cannot be read)."""
    import json

    path = Path(results) / name / "plan.json" if results is not None else None
    try:
        return json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None


def plan_run(name: str, run: dict, top: dict, scratch: Root, env=None, planned: dict | None = None) -> dict:
    """The run's plan (a PlanRecord), or ConfigError listing every reason it cannot run.
    planned: its plan.json from an earlier parse, whose right-sized requests it keeps."""
    env = os.environ if env is None else env
    cfg.check_name(name)
    problems: list[str] = []
    site = top["site"]
    nodes, nproc = _layout(name, run, site, problems)
    world = nodes * nproc
    device = run["device"] if run["device"] != "auto" else ("cuda" if run["gpus"] else "cpu")
    cpus_per_rank, cpus_per_node, mem_gb_per_node = _per_node(name, run, site, nproc, problems)
    batch = _batch(name, run, world, problems)
    _limit_checks(name, run, site, problems)
    if run["slurm"]["mail_user"] and not run["slurm"]["mail_type"]:
        problems.append(f"runs.{name}.slurm.mail_user is set but slurm.mail_type is null, so no mail would be sent: "
                        "set mail_type, e.g. END,FAIL,REQUEUE")
    dataset = _storage_checks(name, run, top, scratch, env, problems)
    # Not for the datasets the workflow writes itself: their files.json appears after the first
    # plan, and the plan must come out the same in every later parse (a changed plan reruns the run).
    size = None if run["data"]["name"] in prepared() else dataset_size(dataset)
    warnings = _dataset_checks(name, run, site, dataset, size, problems)
    account = _account(name, run, env, problems)
    warnings += _trainer_checks(name, run, device, problems)
    script = _script(name, run, problems)
    if problems:
        raise ConfigError(f"run {name!r} refused:\n  - " + "\n  - ".join(problems))

    time_min = dict(run["time_min"])
    plan = {
        "run": name,
        "device": device,
        "backend": "nccl" if device == "cuda" else "gloo",
        "gpus": run["gpus"],
        "nodes": nodes,
        "nproc_per_node": nproc,
        "world_size": world,
        # auto is decided by resolve_strategy when plan.json is written; a script chooses its own
        "strategy": "script" if script else run["strategy"],
        "activation_checkpointing": run["activation_checkpointing"] is True,
        "memory_estimate": None,
        "warnings": warnings,
        "precision": run["precision"],
        "batch": batch,
        "cpus_per_rank": cpus_per_rank,
        "cpus_per_node": cpus_per_node,
        "mem_gb_per_node": mem_gb_per_node,
        "time_min": {**time_min, "total": sum(time_min.values())},
        "roots": {
            "scratch": str(scratch.path),
            "scratch_source": scratch.source,
            "tmp_shared": top["roots"]["tmp_shared"],  # resolved inside the job
        },
        "dataset": str(dataset) if dataset else None,
        "dataset_size": size,
        "fast_root_quota": {"max_files": site["fast_root_max_files"], "max_gb": site["fast_root_max_gb"]},
        "durable_dir": str(run_dir(scratch.path, name) / "checkpoints"),
        "slurm": _slurm_request(run, nodes, nproc, cpus_per_node, mem_gb_per_node, account),
        "env": job_env(run, nodes, cpus_per_rank, device, str(run_dir(scratch.path, name))),
        "script": script,
        "config": run,
    }
    plan["right_sized"], plan["forecast"] = None, None
    if run["resources"] == "measured":
        _right_size(plan, site, scratch, account, (planned or {}).get("right_sized"))
    plan["torchrun"] = torchrun_args(plan)
    return plan


def _forecast_checks(name: str, run: dict) -> None:
    forecast, problems = run["forecast"], []
    if forecast["gpus"]:
        for key in ("nodes", "nproc_per_node"):
            if run[key] is not None:
                problems.append(f"runs.{name}.{key} = {run[key]} is set, but forecast.gpus compares layouts, "
                                f"each with its own {key}: remove {key}")
    if forecast["choose"] and not forecast["gpus"]:
        problems.append(f"runs.{name}.forecast.choose = {forecast['choose']} needs forecast.gpus, the GPU counts "
                        "to choose from, e.g. [3, 6]")
    if problems:
        raise ConfigError(f"run {name!r} refused:\n  - " + "\n  - ".join(problems))


def forecast_run(name: str, run: dict, top: dict, scratch: Root, env=None) -> list[dict]:
    """The run's layouts (forecast.gpus, else its own gpus) forecast now: start, duration, finish."""
    from ..history import everything
    from .forecast import layouts

    _forecast_checks(name, run)
    return layouts(run["forecast"]["gpus"] or [run["gpus"]],
                   lambda gpus: plan_run(name, {**run, "gpus": gpus}, top, scratch, env),
                   everything(scratch.path), env if env is not None else os.environ)


def _chosen_layout(name: str, run: dict, top: dict, scratch: Root, env, planned: dict | None,
                   forecast_now: bool) -> dict:
    """forecast.choose: earliest_finish: the plan of the layout that finishes first. A run keeps the
    layout it was planned with while its config is the same: the forecast moves with the queue, and
    the plan must come out the same in every later parse (inside each job too)."""
    _forecast_checks(name, run)
    if planned and planned.get("forecast") and planned.get("config") == {**run, "gpus": planned["gpus"]}:
        plan = plan_run(name, {**run, "gpus": planned["gpus"]}, top, scratch, env, planned)
        plan["forecast"] = planned["forecast"]
        return plan
    if not forecast_now:
        raise ConfigError(f"run {name!r}: forecast.choose, but its plan.json with the chosen layout is missing "
                          "inside the job: plan the workflow on the submit host (snakemake writes it first)")
    from datetime import datetime

    from .forecast import choice

    at = datetime.now().astimezone()
    rows = forecast_run(name, run, top, scratch, env)
    best, why = choice(rows)
    plan = plan_run(name, {**run, "gpus": best["gpus"]}, top, scratch, env, planned)
    plan["forecast"] = {"at": at.isoformat(timespec="seconds"), "chosen_gpus": best["gpus"],
                        "configured_gpus": run["gpus"], "why": why, "layouts": rows}
    return plan


def _right_size(plan: dict, site: dict, scratch: Root, account: str | None, earlier: dict | None) -> None:
    """resources: measured: the requests earlier runs of this profile used (plan.rightsize); earlier:
    those it was planned with before, which stand while its profile is the same."""
    requests, warning = measured_requests(plan, site, scratch.path, earlier)
    if warning:
        plan["warnings"].append(warning)
    if not requests:
        return
    run, nproc = plan["config"], plan["nproc_per_node"]
    if "cpus_per_rank" in requests:
        plan["cpus_per_rank"] = requests["cpus_per_rank"]["value"]
        plan["cpus_per_node"] = plan["cpus_per_rank"] * nproc
    if "mem_gb_per_node" in requests:
        plan["mem_gb_per_node"] = requests["mem_gb_per_node"]["value"]
    if "time_min" in requests:
        minutes = {**{k: v for k, v in plan["time_min"].items() if k != "total"}, **requests["time_min"]["value"]}
        plan["time_min"] = {**minutes, "total": sum(minutes.values())}
    plan["slurm"] = _slurm_request(run, plan["nodes"], nproc, plan["cpus_per_node"], plan["mem_gb_per_node"], account)
    plan["env"] = job_env(run, plan["nodes"], plan["cpus_per_rank"], plan["device"],
                          str(Path(plan["durable_dir"]).parent))
    plan["right_sized"] = requests


def plan_all(config: dict, env=None, scratch: Root | None = None,
             results: str | Path | None = None, forecast_now: bool = True) -> dict[str, dict]:
    """Plan every run in one process; all refusals are reported together.

    scratch: the durable root already decided where the workflow was planned (see plan_workflow);
    without it the root is resolved here, from the config and the environment. results: where
    each run's plan.json is: a right-sized run keeps the requests it was planned with, and a run
    whose layout a forecast chose keeps that layout. forecast_now: False inside a job, which never
    asks the scheduler."""
    top, runs = cfg.resolve(config)
    scratch = scratch or durable_root(top["roots"]["scratch"], env)
    plans, problems = {}, []
    for name, run in runs.items():
        try:
            planned = _planned(results, name)
            plans[name] = _chosen_layout(name, run, top, scratch, env, planned, forecast_now) \
                if run["forecast"]["choose"] else plan_run(name, run, top, scratch, env, planned)
        except ConfigError as e:
            problems.append(str(e))
    if problems:
        raise ConfigError("\n".join(problems))
    for warning in [w for p in plans.values() for w in p["warnings"]] + plan_warnings(plans, top):
        log.warning(warning)
    return plans


def plan_workflow(config: dict, in_job: bool, results: str | Path = "results") -> dict[str, dict]:
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


def datasets_to_prepare(plans: dict[str, dict]) -> dict[str, str]:
    """{path: built-in dataset name} of the datasets the workflow writes before staging: once each."""
    return {p["dataset"]: p["config"]["data"]["name"] for p in sorted(plans.values(), key=lambda p: p["run"])
            if p["config"]["data"]["name"] in prepared()}


def plan_warnings(plans: dict[str, dict], top: dict) -> list[str]:
    """What will work, but not as the user may expect."""
    warnings = []
    demand = sum(p["gpus"] for p in plans.values())
    limit = top["site"]["max_gpus_per_user"]
    if demand > limit:
        warnings.append(f"these {len(plans)} runs ask for {demand} GPUs together, over the per-user limit of "
                        f"{limit} (site.max_gpus_per_user): at most {limit} GPUs run at once, the rest queue")
    return warnings
