"""One training session: everything the loop hands to the step, the checkpointer and the summary.

A session is one start of the training of a run (a fresh start, or a resume after a stop, a kill or a
requeue). It holds the model as built and as wrapped for DDP or FSDP, its optimizer, learning-rate
schedule and gradient scaler, the data, and where training stands.
"""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..schedule import Position
from ..records import Plan, StageRecord
from . import efficiency
from .batches import first_batch
from .loader import TrainData, training_data
from .finetune import freeze, load as load_init
from .models import build_model
from .monitor import Monitor
from .objective import Objective
from .optim import make_optimizer, make_scheduler
from .parallel.process_group import Dist
from .parallel.wrap import Parallel

log = logging.getLogger("airetrain.train")


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Session:
    plan: Plan
    d: Dist
    data: TrainData
    par: Parallel                   # the model, and how it is wrapped (par.model, par.wrapped)
    objective: Objective            # the forward pass, the loss and the metrics
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    probe: object                   # the training set's first micro-batch, on the device
    flops_per_micro: int            # model FLOPs of one micro-batch, forward and backward
    position: Position = Position()
    monitor: Monitor | None = None  # the best evaluation so far, and early stopping (checkpoint.monitor)
    parameters: dict = field(default_factory=dict)   # {trainable, frozen} parameter counts (model.freeze)
    init: dict | None = None        # what model.init_from loaded, in the run's first session

    @property
    def total_steps(self) -> int:
        return self.data.steps_per_epoch * self.plan.config.train.epochs

    @property
    def stops_early(self) -> bool:
        """Early stopping (train.early_stop) has ended the training before its last step."""
        return bool(self.monitor and self.monitor.should_stop) and self.position.step < self.total_steps

    @property
    def finished(self) -> bool:
        """Every step done, or stopped early: either way, this run is trained."""
        return self.position.step >= self.total_steps or self.stops_early

    def trainer_state(self) -> dict:
        """What a checkpoint keeps besides the model and optimizer (the checkpointer adds the RNG states)."""
        p = self.position
        return {"step": p.step, "epoch": p.epoch, "step_in_epoch": p.step_in_epoch,
                "config": self.plan.config.to_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
                "monitor": self.monitor.state() if self.monitor else None, "init": self.init}

    def start(self, trainer: dict | None, init: tuple[Path, str] | None) -> None:
        """Where this session starts: a checkpoint's trainer state (a resume: the checkpointer has loaded
        the model and optimizer), else model.init_from's weights (init: its file and sha256; a fine-tune's
        first start), else step 0. Then DDP's buckets settle, so that a resumed session reduces as a
        fresh one does."""
        self.resume(trainer)
        if init and trainer is None:
            self.init = load_init(self.par, init[0], init[1], self.plan.config.model.init_strict, self.d)
        self.par.settle_buckets(self.objective, self.probe, self.plan.precision)

    def resume(self, trainer: dict | None) -> None:
        """Continue from a checkpoint's trainer state (None: a fresh start): schedule, scaler, position.
        The model and optimizer are loaded by the checkpointer."""
        if trainer:
            self.scheduler.load_state_dict(trainer["scheduler"])
            if trainer["scaler"]:
                self.scaler.load_state_dict(trainer["scaler"])
            self.init = trainer.get("init")
            if self.monitor and not self.monitor.load(trainer.get("monitor")):
                log.warning("the checkpoint's best and early-stopping counts are of another monitor: they "
                            "start afresh, watching %s (%s)", self.monitor.metric, self.monitor.mode)
        self.position = Position.resumed(trainer, self.data.steps_per_epoch)


def build(plan: Plan, staged: StageRecord, d: Dist) -> Session:
    """The session's data, model, objective, optimizer and schedule, from the plan; at step 0."""
    cfg = plan.config
    data = training_data(plan, staged["target"], d)
    seed_all(cfg.train.seed)   # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = build_model(cfg.model, data.meta).to(d.device)
    parameters = freeze(model, cfg.model.freeze)   # before the optimizer: frozen ones get no state
    objective = Objective(cfg.train, cfg.model)
    probe = first_batch(data.train_set, plan.batch.per_device, d.device)
    flops = efficiency.micro_batch_flops(model, objective, probe, d.device, plan.precision)
    par = Parallel(model, plan, d.device)
    optimizer = make_optimizer(cfg.optim, model, d.device.type)   # FSDP: its parameters sharded in place
    scheduler = make_scheduler(cfg.optim, optimizer, data.steps_per_epoch * cfg.train.epochs)
    scaler = torch.amp.GradScaler(d.device.type, enabled=plan.precision == "fp16")
    monitor = Monitor.from_config(cfg, objective.directions) if data.eval_set is not None else None
    return Session(plan, d, data, par, objective, optimizer, scheduler, scaler, probe, flops, monitor=monitor,
                   parameters=parameters)
