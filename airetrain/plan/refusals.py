"""What the plan refuses before anything is submitted, and what it warns about.

Each check appends its problems (a message naming the key and the fix) to a list; the planner
refuses a run with all of them at once. Warnings are returned: the run goes ahead.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from ..builtin_models import MODELS, channels_last_applies, evaluation_figures
from ..catalog import default_path
from ..environment import SCRIPT_VARIABLES, unknown_script_variables
from ..errors import ConfigError
from ..quota import pack_command, quota_messages
from ..records import Script
from ..roots import Root, is_under
from ..run_config import RunConfig, Settings, Site
from ..shards import INDEX
from ..text import did_you_mean
from ..tracking.registry import TRACKERS
from ..profiles import ACCOUNT_NAME as SLURM_NAME   # accounts and QoS, also from the environment ($SBATCH_ACCOUNT)


def refuse(name: str, problems: list[str], why: str = "refused") -> None:
    """Raise ConfigError for the run with every problem, if there is one."""
    if problems:
        raise ConfigError(f"run {name!r} {why}:\n  - " + "\n  - ".join(problems))


def limits(name: str, run: RunConfig, site: Site, problems: list[str]) -> None:
    """The partition's limits: GPUs per user, the longest job, and time left to train before the stop."""
    if run.gpus > site.max_gpus_per_user:
        problems.append(f"runs.{name}.gpus = {run.gpus} exceeds site.max_gpus_per_user = "
                        f"{site.max_gpus_per_user}: the job would never start; ask for at most that many")
    total_min = run.time_min.total
    if total_min > site.max_wall_hours * 60:
        problems.append(f"runs.{name}.time_min adds up to {total_min} min, over site.max_wall_hours = "
                        f"{site.max_wall_hours} h; shorten train (the run resumes from its checkpoint "
                        "when resubmitted)")
    margin = run.checkpoint.stop_margin_min
    if margin >= total_min:
        problems.append(f"runs.{name}.checkpoint.stop_margin_min = {margin} leaves no time to train in a job of "
                        f"{total_min} min (time_min); lower it or raise time_min.train")
    hang = run.train.hang_timeout_min
    if hang and hang <= margin:
        problems.append(f"runs.{name}.train.hang_timeout_min = {hang} is not above checkpoint.stop_margin_min = "
                        f"{margin}: a save may take that long without a step, and the watchdog would call it a hang; "
                        "raise it, or set 0 to turn the watchdog off")
    if run.slurm.mail_user and not run.slurm.mail_type:
        problems.append(f"runs.{name}.slurm.mail_user is set but slurm.mail_type is null, so no mail would be sent: "
                        "set mail_type, e.g. END,FAIL,REQUEUE")


def fsdp(name: str, run: RunConfig, problems: list[str]) -> None:
    """What FSDP cannot do, where FSDP is asked for or chosen by the memory estimate."""
    if run.precision == "fp16":
        problems.append(f"runs.{name}.precision = 'fp16' with FSDP is not supported (it needs a sharded "
                        "GradScaler); use precision: bf16, which needs no scaler")


def trainer(name: str, run: RunConfig, device: str, problems: list[str]) -> list[str]:
    """The trainer's options that cannot work together, and warnings, without building the model."""
    model = run.model
    if run.strategy == "fsdp":
        fsdp(name, run, problems)
    if run.fsdp_cpu_offload and device != "cuda":
        problems.append(f"runs.{name}.fsdp_cpu_offload needs a GPU: without one there is nothing to offload "
                        "from; remove it for CPU runs")
    if run.fsdp_cpu_offload and run.strategy == "ddp":
        problems.append(f"runs.{name}.fsdp_cpu_offload applies to FSDP only; set strategy: fsdp or remove it")
    if run.channels_last and not channels_last_applies(model.name, model.dims):
        convolutional = ", ".join(n for n, m in MODELS.items() if m.convolutional_2d)
        problems.append(f"runs.{name}.channels_last applies to 2D convolutional models ({convolutional} "
                        f"with dims: 2, or your own), not to {model.name}"
                        + (" with dims: 3" if MODELS[model.name].convolutional_2d else "") + "; remove it")
    if run.ddp_bucket_mb != 25 and run.strategy == "fsdp":
        problems.append(f"runs.{name}.ddp_bucket_mb applies to DDP; FSDP reduces per unit: remove it")
    if model.name in MODELS and MODELS[model.name].attention and model.width % model.heads:
        problems.append(f"runs.{name}.model.heads = {model.heads} does not divide model.width = {model.width}")
    init = model.init_from
    if isinstance(init, str) and not Path(init).expanduser().exists():
        problems.append(f"runs.{name}.model.init_from: {init} does not exist (a path relative to "
                        f"{Path.cwd()}, or absolute)")
    if run.train.script and (init is not None or model.freeze):
        problems.append(f"runs.{name}.model.init_from and model.freeze are the built-in trainer's; a "
                        "train.script loads its own weights")
    _monitored(name, run, problems)
    if run.train.early_stop and run.checkpoint.monitor is None:
        problems.append(f"runs.{name}.train.early_stop watches checkpoint.monitor, which is null: set "
                        "checkpoint.monitor (eval_loss, or eval_<metric>) or remove early_stop")
    return _trainer_warnings(name, run, device)


def profile(name: str, run: RunConfig, world: int, problems: list[str]) -> None:
    """train.profile: the built-in trainer's, on ranks the run has."""
    cfg = run.train.profile
    if cfg is None:
        return
    if run.train.script:
        problems.append(f"runs.{name}.train.profile is the built-in trainer's; a train.script can run "
                        "torch.profiler itself: remove it")
    if missing := sorted(r for r in set(cfg.ranks) if r >= world):
        problems.append(f"runs.{name}.train.profile.ranks: {', '.join(map(str, missing))} not among the run's "
                        f"{world} ranks (0-{world - 1})")


def _monitored(name: str, run: RunConfig, problems: list[str]) -> None:
    """checkpoint.monitor and tune.metric name a figure the run's evaluation reports, where that is known (a
    built-in model and loss): a wrong one would fail inside the job, after the queue and the first epoch."""
    if run.train.script or run.evaluate:
        return
    figures = evaluation_figures(run.model.name, run.train.loss, run.train.metrics, run.train.forward)
    if figures is None:
        return
    for key, value in (("checkpoint.monitor", run.checkpoint.monitor),
                       ("tune.metric", run.tune.metric if run.tune else None)):
        if value is not None and value not in figures:
            problems.append(f"runs.{name}.{key} = {value!r} is not a figure this run reports"
                            f"{did_you_mean(value, figures)}; {run.model.name} with its loss reports "
                            f"{', '.join(figures)}")


def _trainer_warnings(name: str, run: RunConfig, device: str) -> list[str]:
    warnings = []
    if device == "cuda":
        if run.model.width % 8:
            warnings.append(f"run {name}: model.width = {run.model.width} is not a multiple of 8: "
                            "tensor cores run slower on such shapes")
        if run.batch.per_device % 8:
            warnings.append(f"run {name}: batch.per_device = {run.batch.per_device} is not a multiple of 8: "
                            "tensor cores run slower on such shapes")
    elif run.compile:
        warnings.append(f"run {name}: compile is ignored on CPU")
    hang, job_min = run.train.hang_timeout_min, run.time_min.total
    if hang and hang >= job_min:
        warnings.append(f"run {name}: train.hang_timeout_min = {hang} is not shorter than the job ({job_min} min): "
                        "the watchdog cannot fire before the time limit")
    return warnings


def _not_home(key: str, path: Path, explicit: bool, env, problems: list[str]) -> None:
    home = env.get("HOME")
    if explicit and home and is_under(path, home):
        problems.append(
            f"{key} = {path} is under $HOME ({home}): $HOME is small, slow NFS and must never hold "
            "datasets or checkpoints; put it on $SCRATCH"
        )


def dataset_path(name: str, run: RunConfig, scratch: Root, problems: list[str]) -> Path | None:
    """The directory to stage, or None when there is nothing to stage (synthetic data, a user's dataset
    without a path)."""
    data = run.data
    if data.name == "synthetic":
        return None
    path = data.path or default_path(data.name)
    if path is None:
        if data.name in ("npy", "image_folder"):
            what = "the shard directory" if data.name == "npy" else "the image folder, or its packed shards"
            problems.append(f"runs.{name}.data.path is required for data.name: {data.name} ({what})")
        return None
    path = Path(path).expanduser()
    return path if path.is_absolute() else scratch.path / path


def storage(name: str, run: RunConfig, settings: Settings, scratch: Root, env, problems: list[str]) -> Path | None:
    """The dataset's path on the durable root; nothing durable under $HOME."""
    dataset = dataset_path(name, run, scratch, problems)
    if dataset is not None:
        data_path = Path(run.data.path or default_path(run.data.name))
        _not_home(f"runs.{name}.data.path", dataset, data_path.is_absolute() or not scratch.fallback, env, problems)
    _not_home("roots.scratch", scratch.path, not scratch.fallback, env, problems)
    if settings.roots.tmp_shared:
        _not_home("roots.tmp_shared", Path(settings.roots.tmp_shared), True, env, problems)
    return dataset


def dataset(name: str, run: RunConfig, site: Site, path: Path | None, size: dict | None,
            problems: list[str]) -> list[str]:
    """The packed format where it is asked for, and the fast root's quotas where the size is known
    (the dataset's index or files.json); warnings returned."""
    warnings: list[str] = []
    if path is not None and run.data.format == "shards" and (size or {}).get("format") != "shards":
        problems.append(f"runs.{name}.data.format is shards, but {path} has no shard index ({INDEX}): "
                        f"pack it first: {pack_command(path)}")
    elif size is not None:
        refused, slow = quota_messages(path, size["files"], size["bytes"], site.fast_root_max_files,
                                       site.fast_root_max_gb, packed=size["format"] == "shards")
        problems.extend(f"runs.{name}.data.path: {p}" for p in refused)
        warnings.extend(f"run {name}: {w}" for w in slow)
    return warnings


def account(name: str, run: RunConfig, env, problems: list[str]) -> str | None:
    """The run's account, else $SBATCH_ACCOUNT (validated: it reaches sbatch), else none."""
    chosen = run.slurm.account or env.get("SBATCH_ACCOUNT") or None
    if not run.slurm.account and chosen and not SLURM_NAME.match(chosen):
        problems.append(f"$SBATCH_ACCOUNT = {chosen!r} is not a SLURM account name (letters, digits, '_', '.' "
                        f"and '-'); fix the variable, or set runs.{name}.slurm.account")
    return chosen


def script(name: str, run: RunConfig, problems: list[str]) -> Script | None:
    """Script mode's script (absolute, from the working directory) and its arguments, if it exists."""
    if not run.train.script:
        return None
    path = Path(run.train.script).expanduser().absolute()
    if not path.is_file():
        problems.append(f"runs.{name}.train.script = {run.train.script!r}: no such file ({path})")
    if unknown := unknown_script_variables(run.train.args):
        problems.append(f"runs.{name}.train.args name {', '.join('$' + n for n in unknown)}, which airetrain does not "
                        f"set; the script's arguments may name {', '.join('$' + n for n in SCRIPT_VARIABLES)}")
    return Script(path, list(run.train.args))


def forecast(name: str, run: RunConfig) -> None:
    """forecast: settings that cannot work."""
    problems = []
    if run.forecast.gpus:
        for key in ("nodes", "nproc_per_node"):
            if getattr(run, key) is not None:
                problems.append(f"runs.{name}.{key} = {getattr(run, key)} is set, but forecast.gpus compares "
                                f"layouts, each with its own {key}: remove {key}")
    if run.forecast.choose and not run.forecast.gpus:
        problems.append(f"runs.{name}.forecast.choose = {run.forecast.choose} needs forecast.gpus, the GPU counts "
                        "to choose from, e.g. [3, 6]")
    refuse(name, problems)


def tracking(name: str, run: RunConfig, site: Site, problems: list[str]) -> list[str]:
    """Trackers: each one's package installed (they are optional extras), an MLflow URI that is a
    server or a store without a password; a warning for online W&B where the compute nodes reach no
    internet. A script's job.log lines reach its trackers as the built-in trainer's do."""
    warnings = []
    for key, cfg in run.tracking.named.items():
        sink = TRACKERS[key]
        if importlib.util.find_spec(sink.package) is None:
            problems.append(f"runs.{name}.tracking.{key} needs the {sink.package} package, which is not "
                            f"installed here: pip install 'airetrain[{key}]'")
        refused, warned = sink.checks(f"runs.{name}.tracking.{key}", cfg, site)
        problems += refused
        warnings += [f"run {name}: {w}" for w in warned]
    return warnings
