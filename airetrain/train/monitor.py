"""The monitored metric (checkpoint.monitor): the best evaluation so far, and with train.early_stop
when to stop. Decisions only, no torch.

The evaluator hands it every evaluation during training. An evaluation that improves on the best
makes the checkpointer save at that step, and that checkpoint is never pruned (checkpoint.keep);
the loop stops where early stopping says so. Its state is part of every checkpoint, so a resumed
run keeps the same best and stops at the same step as an uninterrupted one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..direction import direction

@dataclass
class Monitor:
    metric: str                     # eval_loss or eval_<metric>
    mode: str                       # min or max
    patience: int | None = None     # train.early_stop.patience; None: no early stopping
    min_delta: float = 0.0
    best: dict | None = None        # {step, epoch, metric, value} of the best evaluation so far
    reference: float | None = None  # early stopping's best: improved on by more than min_delta
    since: int = 0                  # evaluations in a row that have not

    @classmethod
    def from_config(cls, config, declared: dict[str, str]) -> Monitor | None:
        """The run's monitor; None where checkpoint.monitor is null."""
        metric = config.checkpoint.monitor
        if metric is None:
            return None
        stop = config.train.early_stop
        return cls(metric, direction(metric, config.checkpoint.mode, declared),
                   stop.patience if stop else None, stop.min_delta if stop else 0.0)

    def value_of(self, evaluation: dict) -> float:
        name = self.metric.removeprefix("eval_")
        if name == "loss":
            return evaluation["loss"]
        if name not in evaluation["metrics"]:
            known = ", ".join(["eval_loss", *(f"eval_{m}" for m in sorted(evaluation["metrics"]))])
            raise ValueError(f"checkpoint.monitor: {self.metric} is not measured by this run's evaluation; "
                             f"it measures: {known}")
        return evaluation["metrics"][name]

    def _beats(self, value: float, than: float | None, margin: float) -> bool:
        if math.isnan(value):
            return False
        if than is None:
            return True
        return value < than - margin if self.mode == "min" else value > than + margin

    def update(self, step: int, epoch: int, evaluation: dict) -> bool:
        """Take one evaluation (after optimizer step `step` of epoch `epoch`); whether it is the new best."""
        value = self.value_of(evaluation)
        improved = self._beats(value, self.best["value"] if self.best else None, 0.0)
        if improved:
            self.best = {"step": step, "epoch": epoch, "metric": self.metric, "value": value}
        if self._beats(value, self.reference, self.min_delta):
            self.reference, self.since = value, 0
        else:
            self.since += 1
        return improved

    @property
    def should_stop(self) -> bool:
        """Early stopping: `patience` evaluations in a row without an improvement by more than min_delta."""
        return self.patience is not None and self.since >= self.patience

    def state(self) -> dict:
        return {"metric": self.metric, "mode": self.mode, "best": self.best, "reference": self.reference,
                "since": self.since}

    def load(self, state: dict | None) -> bool:
        """Continue from a checkpoint's monitor state; False (a fresh start) where it watched another
        metric or direction, or none."""
        if not state or (state["metric"], state["mode"]) != (self.metric, self.mode):
            return False
        self.best, self.reference, self.since = state["best"], state["reference"], state["since"]
        return True

    def stopped_early(self, step: int, epoch: int) -> dict | None:
        """train.json's stopped_early: where it stopped and its best; None where it trained to the end."""
        if not self.should_stop:
            return None
        return {"step": step, "epoch": epoch, "best_step": self.best["step"] if self.best else None,
                "best_value": self.best["value"] if self.best else None}
