"""The training's schedule: when to save, when to evaluate, and where a resumed run continues.

Decisions only, no files, no torch: the checkpointer (saves) and the trainer (evaluations) read them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .run_config import RunConfig


def scheduled(step: int, epoch: int, epoch_end: bool, every_steps: int | None, every_epochs: int,
              epochs: int) -> bool:
    """After optimizer step `step` (from 1) of epoch `epoch` (from 0): every `every_steps` steps (0 or
    None: never by steps), at the end of every `every_epochs`-th epoch, and at the end of the last."""
    if every_steps and step % every_steps == 0:
        return True
    return epoch_end and ((epoch + 1) % every_epochs == 0 or epoch == epochs - 1)


@dataclass(frozen=True)
class SavePolicy:
    """checkpoint.every_steps (0: off) and checkpoint.every_epochs; the last epoch always saves."""
    every_steps: int
    every_epochs: int
    epochs: int

    @classmethod
    def from_config(cls, run: RunConfig) -> SavePolicy:
        return cls(run.checkpoint.every_steps, run.checkpoint.every_epochs, run.train.epochs)

    def due(self, step: int, epoch: int, epoch_end: bool) -> bool:
        """Is it time to save after optimizer step `step` (from 1) of epoch `epoch` (from 0)?"""
        return scheduled(step, epoch, epoch_end, self.every_steps, self.every_epochs, self.epochs)

    def due_at(self, position: Position, steps_per_epoch: int) -> bool:
        """Is it time to save at this position (after its last step)?"""
        return self.due(position.step, position.epoch, epoch_end=position.step_in_epoch == steps_per_epoch)


@dataclass(frozen=True)
class EvalPolicy:
    """train.eval_every_steps (None: off) and train.eval_every_epochs; the last step always evaluates."""
    every_steps: int | None
    every_epochs: int
    epochs: int

    @classmethod
    def from_config(cls, run: RunConfig) -> EvalPolicy:
        return cls(run.train.eval_every_steps, run.train.eval_every_epochs, run.train.epochs)

    def due_at(self, position: Position, steps_per_epoch: int) -> bool:
        """Is an evaluation due after this position's last step?"""
        return scheduled(position.step, position.epoch, position.step_in_epoch == steps_per_epoch,
                         self.every_steps, self.every_epochs, self.epochs)


@dataclass(frozen=True)
class Position:
    """Where training stands: optimizer steps done, the epoch, and the steps done in that epoch."""
    step: int = 0
    epoch: int = 0
    step_in_epoch: int = 0

    @classmethod
    def resumed(cls, trainer: dict | None, steps_per_epoch: int) -> Position:
        """The position to continue from, given a checkpoint's trainer state (None: a fresh start).
        A checkpoint saved at the end of an epoch continues at the start of the next one."""
        if not trainer:
            return cls()
        if trainer["step_in_epoch"] >= steps_per_epoch:
            return cls(trainer["step"], trainer["epoch"] + 1, 0)
        return cls(trainer["step"], trainer["epoch"], trainer["step_in_epoch"])

    def stepped(self) -> Position:
        """After one more optimizer step."""
        return Position(self.step + 1, self.epoch, self.step_in_epoch + 1)

    def next_epoch(self) -> Position:
        """At the start of the next epoch."""
        return Position(self.step, self.epoch + 1, 0)
