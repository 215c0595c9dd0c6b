"""When to save, and where a resumed run continues: decisions only, no files and no torch."""
from __future__ import annotations

from dataclasses import dataclass

from ..run_config import RunConfig


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
        if self.every_steps and step % self.every_steps == 0:
            return True
        return epoch_end and ((epoch + 1) % self.every_epochs == 0 or epoch == self.epochs - 1)

    def due_at(self, position: Position, steps_per_epoch: int) -> bool:
        """Is it time to save at this position (after its last step)?"""
        return self.due(position.step, position.epoch, epoch_end=position.step_in_epoch == steps_per_epoch)


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
