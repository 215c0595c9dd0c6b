"""TensorBoard curves of a run: results/<run>/tensorboard/, so `tensorboard --logdir results` shows
every run side by side. Rank 0 writes, at the log interval, through torch.utils.tensorboard.

A resumed session starts with a purge at its first new step: the steps a killed session logged
after its last checkpoint are logged again, and TensorBoard drops the older copies, so a curve has
each step once.
"""
from __future__ import annotations

from pathlib import Path

from ..tracking.names import tag


class Curves:
    def __init__(self, logdir: Path, resumed_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(logdir), purge_step=resumed_step + 1)

    def log(self, step: int, figures: dict) -> None:
        """The figures of one log line under the trackers' names (train/loss, eval/<name>); flushed, so a kill
        loses nothing logged."""
        for key, value in figures.items():
            name = tag(key)
            if name and value is not None:
                self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
