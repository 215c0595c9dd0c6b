"""The resolved configuration as typed records: one dataclass per section of the schema, one field per key.

The schema (airetrain/workflow/schemas/config.schema.yaml) stays the one source of the keys, their defaults
and their descriptions: the planner validates a config against it and fills in its defaults, and
only then are these records made, from a complete config. A test fails when a record and the
schema disagree (a key missing on either side, or a type that does not fit).

    run = RunConfig.from_dict(...)    # what plan.config holds
    run.train.seed, run.batch.global_, run.checkpoint.async_   # `global` and `async` are Python keywords
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .schema import run_defaults
from .typed import from_dict, to_dict


class _Record:
    @classmethod
    def from_dict(cls, data: dict, where: str = ""):
        return from_dict(cls, data, where)

    def to_dict(self) -> dict:
        return to_dict(self)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @classmethod
    def with_defaults(cls, section: str, partial: dict):
        """A section of a run (model, data, ...) from some of its keys, the schema's defaults for the rest."""
        return cls.from_dict({**run_defaults()[section], **partial}, section)


@dataclass(frozen=True)
class Roots(_Record):
    scratch: str | None
    tmp_shared: str | None


@dataclass(frozen=True)
class Energy(_Record):
    cpu_core_w: float
    memory_w_per_gb: float
    pue: float
    carbon_g_per_kwh: float


@dataclass(frozen=True)
class Site(_Record):
    gpus_per_node: int
    gpu_type: str | None
    max_gpus_per_user: int
    max_wall_hours: float
    cores_per_node: int
    mem_gb_per_node: float
    fast_root_max_files: int
    fast_root_max_gb: float
    compute_nodes_online: bool
    energy: Energy
    allreduce_floor_gbps: float | None = None
    workflow_partition: str | None = None


@dataclass(frozen=True)
class Forecast(_Record):
    gpus: list[int]
    choose: str | None


@dataclass(frozen=True)
class TimeMin(_Record):
    stage: int
    train: int
    promote: int

    @property
    def total(self) -> int:
        return self.stage + self.train + self.promote


@dataclass(frozen=True)
class Model(_Record):
    name: str
    width: int
    depth: int
    heads: int
    patch_size: int
    dropout: float
    dims: int
    levels: int
    fsdp_units: list[str] | None
    init_from: str | dict | None    # a path, or {run, which}
    init_strict: bool
    freeze: list[str]
    options: dict                   # a user model's own hyperparameters (model.options.<key>)


@dataclass(frozen=True)
class Data(_Record):
    name: str
    path: str | None
    format: str
    workers: int | None
    prefetch: int
    verify_sha256: bool
    samples: int
    shape: list[int]
    random_crop: bool
    random_flip: bool
    classes: int
    vocab: int | None
    seq_len: int

    @property
    def user(self) -> bool:
        """A user's dataset, named by its import path."""
        return ":" in self.name


@dataclass(frozen=True)
class Batch(_Record):
    global_: int
    per_device: int


@dataclass(frozen=True)
class Optim(_Record):
    name: str
    lr: float
    weight_decay: float
    momentum: float
    schedule: str
    warmup_steps: int
    grad_clip_norm: float | None
    no_decay_norm_bias: bool
    fused: bool | None


@dataclass(frozen=True)
class EarlyStop(_Record):
    patience: int
    min_delta: float = 0.0   # not a schema default: a default inside an option that is null by default
                             # breaks Snakemake's validate(), which sets defaults below a null


@dataclass(frozen=True)
class Profile(_Record):
    # defaults here, not in the schema: inside an option that is null by default (EarlyStop's note)
    start_step: int = 10
    steps: int = 5
    ranks: list[int] | tuple[int, ...] = (0,)   # a list from a config, the default a tuple (immutable)
    memory: bool = False


@dataclass(frozen=True)
class Train(_Record):
    epochs: int
    eval_every_epochs: int
    eval_every_steps: int | None
    early_stop: EarlyStop | None
    seed: int
    deterministic: bool
    log_every_steps: int
    hang_timeout_min: float
    tensorboard: bool
    profile: Profile | None
    loss: str | None
    forward: str | None
    script: str | None
    args: list[str]
    metrics: str | None


@dataclass(frozen=True)
class Checkpoint(_Record):
    every_epochs: int
    every_steps: int | None
    keep: int
    monitor: str | None
    mode: str
    async_: bool
    writer: str
    stop_margin_min: float
    requeue: bool
    max_requeues: int
    max_restarts: int


@dataclass(frozen=True)
class Health(_Record):
    preflight: bool
    straggler_ratio: float
    straggler_intervals: int
    exclude_stragglers: bool
    allreduce_floor_gbps: float | None   # None in the config: the site's (the plan fills it in)


@dataclass(frozen=True)
class Code(_Record):
    max_mb: float


@dataclass(frozen=True)
class Retry(_Record):
    oom: int


@dataclass(frozen=True)
class Slurm(_Record):
    partition: str
    account: str | None
    qos: str | None
    mail_type: str | None
    mail_user: str | None
    nccl_socket_ifname: str | None


@dataclass(frozen=True)
class WandbTracking(_Record):
    # defaults here, not in the schema: Snakemake's validate cannot fill keys under an option that is null
    project: str
    entity: str | None = None
    mode: str = "offline"


@dataclass(frozen=True)
class MlflowTracking(_Record):
    tracking_uri: str
    experiment: str = "airetrain"


@dataclass(frozen=True)
class Tracking(_Record):
    wandb: WandbTracking | None
    mlflow: MlflowTracking | None
    log_weights: str

    @property
    def named(self) -> dict:
        """{tracker: its settings} for each tracker the run names: every key here that holds a tracker's settings
        (tracking/registry.py has each one's sink)."""
        return {f.name: value for f in dataclasses.fields(self) if isinstance(value := getattr(self, f.name), _Record)}


@dataclass(frozen=True)
class Tune(_Record):
    # defaults here, not in the schema: Snakemake's validate cannot fill keys under an option that is null
    space: dict                      # dotted run key -> its distribution, in the order they are suggested
    trials: int = 20
    metric: str | None = None        # None: checkpoint.monitor
    sampler: dict | None = None      # {tpe|random|grid: {seed}}; None: tpe, seed 0
    pruner: str | dict | None = None  # none, or {successive_halving: {min_epochs, reduction}}; None: the latter
    parallel: int | None = None      # None: as many as the GPU cap allows

    @property
    def sampler_name(self) -> str:
        return next(iter(self.sampler or {"tpe": {}}))

    @property
    def seed(self) -> int:
        options = (self.sampler or {}).get(self.sampler_name) or {}
        return 0 if options.get("seed") is None else options["seed"]

    @property
    def halving(self) -> dict | None:
        """{min_epochs, reduction} of successive halving, or None: no pruner."""
        if self.pruner == "none":
            return None
        options = (self.pruner or {}).get("successive_halving") or {}
        return {"min_epochs": options.get("min_epochs", 1), "reduction": options.get("reduction", 3)}


@dataclass(frozen=True)
class RunConfig(_Record):
    """One run, every key filled in."""
    device: str
    gpus: int
    processes: int
    pack: str | int        # auto, none, or at most this many runs an allocation
    nodes: int | None
    nproc_per_node: int | None
    cpus_per_rank: int | None
    mem_gb_per_rank: float | None
    resources: str
    forecast: Forecast
    time_min: TimeMin
    strategy: str
    memory_budget_gb: float | None   # None in the config: the site GPU's (the plan fills it in)
    activation_checkpointing: bool | str   # auto, true or false
    fsdp_cpu_offload: bool
    ddp_bucket_mb: float
    channels_last: bool
    compile: bool
    precision: str
    evaluate: dict | None   # an evaluation run: {run, which} whose weights it evaluates
    model: Model
    data: Data
    batch: Batch
    optim: Optim
    train: Train
    checkpoint: Checkpoint
    health: Health
    code: Code
    retry: Retry
    slurm: Slurm
    tracking: Tracking
    params: dict           # a script's own values (job.params()): a sweep's or a search's params.<name>
    tune: Tune | None


@dataclass(frozen=True)
class Settings(_Record):
    """The settings every run shares: where data lives, and the site's limits."""
    roots: Roots
    site: Site
