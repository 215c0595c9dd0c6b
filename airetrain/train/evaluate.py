"""Evaluation on the held-out split, spread over the ranks: the loss, and each metric; and the
evaluations during training, on their schedule (train.eval_every_epochs, train.eval_every_steps)."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, Subset

from ..schedule import EvalPolicy
from . import batches, efficiency
from .parallel import process_group
from .progress import Progress
from .session import Session
from .step import autocast

EVAL_BATCH = 512


@torch.no_grad()
def evaluate(par, objective, dataset, d: process_group.Dist, precision: str, on_batch=lambda: None) -> dict:
    """{"loss": mean over the dataset, "samples": how many, "metrics": {name: sum / count}}; None
    without a dataset.
    on_batch is called after every forward pass (the hang watchdog's heartbeat).

    Each rank scores every world_size-th sample. Every rank runs the same number of forward passes
    (FSDP's all-gathers are collectives): a rank whose share is used up runs an empty batch.
    """
    if dataset is None or len(dataset) == 0:
        return None
    par.model.eval()
    shard = Subset(dataset, range(d.rank, len(dataset), d.world_size))
    passes = math.ceil(math.ceil(len(dataset) / d.world_size) / EVAL_BATCH)
    loader = iter(DataLoader(shard, batch_size=EVAL_BATCH))
    empty = batches.first_rows(next(iter(DataLoader(dataset, batch_size=1))), 0)
    loss_sum = samples = 0.0
    sums: dict[str, list[float]] = {}
    for _ in range(passes):
        batch = batches.to_device(next(loader, empty), d.device)
        with autocast(d.device, precision, par.autocast_needed()):
            output = objective.forward(par.wrapped, batch)
            n = batches.size(batch)
            if n:
                loss_sum += objective.loss(output, batch).item() * n
                samples += n
                for name, (value, count) in objective.metrics(output, batch).items():
                    total = sums.setdefault(name, [0.0, 0.0])
                    total[0] += value
                    total[1] += count
        on_batch()
    names = _agreed_names(sorted(sums), d)   # every rank reduces the same list
    reduced = process_group.reduce([loss_sum, samples, *(v for n in names for v in sums.get(n, [0.0, 0.0]))])
    par.model.train()
    loss_sum, samples, rest = reduced[0], reduced[1], reduced[2:]
    return {"loss": loss_sum / samples, "samples": int(samples),
            "metrics": {n: rest[2 * i] / rest[2 * i + 1] for i, n in enumerate(names) if rest[2 * i + 1]}}


def _agreed_names(names: list[str], d: process_group.Dist) -> list[str]:
    """The metric names of rank 0, which always has samples, known to every rank (a collective)."""
    if d.world_size == 1:
        return names
    shared = [names]
    torch.distributed.broadcast_object_list(shared, src=0)
    return shared[0]


class Evaluator:
    """The evaluations during training: after each step the schedule asks for (schedule.EvalPolicy; the last
    step always), over the evaluation split (loader.TrainData.eval_set: the validation split, else the
    test split). Each becomes a metrics.jsonl line and eval/* curves (progress.evaluated), goes to the
    session's monitor (the best so far, early stopping), and its time is kept out of training's figures
    (throughput, MFU): progress excludes it. The run's final evaluation is on the test split (final)."""

    def __init__(self, s: Session, progress: Progress, heartbeat: Callable[[], None]):
        self.s, self.progress, self.heartbeat = s, progress, heartbeat   # heartbeat: after each batch
        self.policy = EvalPolicy.from_config(s.plan.config)
        self.seconds = 0.0                            # all evaluations of this session
        self.count = 0
        self.last: tuple[int, dict] | None = None     # (step, evaluation) of the newest

    def after_step(self) -> bool:
        """Evaluate where the schedule asks; whether that evaluation is the monitored metric's new best."""
        s = self.s
        if s.data.eval_set is None or not self.policy.due_at(s.position, s.data.steps_per_epoch):
            return False
        evaluation, spent = self._run()
        self.progress.exclude(spent)
        return bool(s.monitor and evaluation and s.monitor.update(s.position.step, s.position.epoch, evaluation))

    def final(self) -> dict | None:
        """The run's final evaluation, on the test split (None without one). Without a validation split
        the evaluations ran on the test split, and the one after the last step is the final one (a
        session resumed from the last step's checkpoint evaluates now). With one, the curve stays the
        validation split's, and the test split is evaluated once, here."""
        s = self.s
        if s.data.eval_set is s.data.test_set:
            if self.last is not None and self.last[0] == s.position.step:
                return self.last[1]
            return self._run()[0]
        return self._timed(s.data.test_set)[0]

    def _timed(self, dataset) -> tuple[dict | None, float]:
        """An evaluation of dataset, its time counted in this session's: (its figures, its seconds)."""
        s = self.s
        t0 = efficiency.now(s.d.device)
        evaluation = evaluate(s.par, s.objective, dataset, s.d, s.plan.precision, self.heartbeat)
        spent = efficiency.now(s.d.device) - t0
        self.seconds += spent
        return evaluation, spent

    def _run(self) -> tuple[dict | None, float]:
        """One evaluation of the evaluation split, recorded: (its figures, its seconds)."""
        s = self.s
        evaluation, spent = self._timed(s.data.eval_set)
        self.count += evaluation is not None
        self.last = (s.position.step, evaluation)
        self.progress.evaluated(s.position.step, s.position.epoch, evaluation)
        return evaluation, spent
