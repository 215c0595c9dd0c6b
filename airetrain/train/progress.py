"""This session's progress: step times, data waits, the loss since the last log line, metrics.jsonl."""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from ..rundir import metrics_log
from ..records import Plan
from . import efficiency
from .parallel import process_group

log = logging.getLogger("airetrain.train")


def warmup_steps(steps: int) -> int:
    """The steps of a session counted as warm-up: a fifth of them, at most 10; none of 1 step."""
    return min(10, steps // 5) if steps > 1 else 0


class Progress:
    """Counts this session's steps and writes a log line and a metrics.jsonl line every
    train.log_every_steps steps and at the last step (rank 0 writes; every rank must call
    `step_done`, whose loss average is a collective)."""

    def __init__(self, d: process_group.Dist, plan: Plan, total_steps: int, metrics_path: Path, curves=None,
                 extra=lambda: {}, start_step: int = 0, tracker=None):
        """curves: where rank 0 also draws each line (curves.Curves, TensorBoard), closed with it; tracker:
        where rank 0 also sends it (tracking's Sender, closed by the loop); extra: figures read at each
        log line (the learning rate, the GPU's latest sample)."""
        self.d, self.total_steps, self.curves, self.extra = d, total_steps, curves, extra
        self.sinks = [sink for sink in (curves, tracker) if sink is not None]
        self.global_batch = plan.batch.global_
        self.log_every = plan.config.train.log_every_steps
        self.file = None
        if d.is_main:   # the durable history first, then results/<run>/metrics.jsonl (metrics_log.py)
            self.file = metrics_log.Writer(metrics_log.durable_path(plan.durable_dir), metrics_path)
            self.file.begin(start_step)
        self.steps = 0                      # optimizer steps in this session
        self.wait_s = self.step_s = 0.0     # seconds waiting for data, seconds of whole steps
        self.loss = float("nan")            # mean loss of the last logged window, over ranks
        self.grad_norm: torch.Tensor | None = None   # the last step's gradient norm, where it was measured
        self.window_loss = torch.zeros((), device=d.device)
        self.window_steps = 0
        self.t_start = time.perf_counter()
        self._last: dict | None = None   # the last step's line, held for the evaluation
        # the session's first steps (compilation, the allocator's growth, cuDNN's choices) are kept
        # out of the steady-state figures: the device is drained once, when they end
        self.warmup_steps = warmup_steps(total_steps - start_step)
        self.warmup_s: float | None = None
        self.t_steady: float | None = None

    def new_epoch(self) -> None:
        """The loss window restarts with each epoch, as it does after each log line."""
        self._restart_window()

    def _restart_window(self) -> None:
        self.window_loss.zero_()
        self.window_steps = 0

    def logs(self, step: int) -> bool:
        """Whether step gets a log line."""
        return step % self.log_every == 0 or step == self.total_steps

    def step_done(self, step: int, epoch: int, loss: torch.Tensor, wait_s: float, step_s: float,
                  grad_norm: torch.Tensor | None = None) -> None:
        self.steps += 1
        self.grad_norm = grad_norm
        self.wait_s += wait_s
        self.step_s += step_s
        self.window_loss += loss
        self.window_steps += 1
        if self.steps == self.warmup_steps:
            self.t_steady = efficiency.now(self.d.device)
            self.warmup_s = self.t_steady - self.t_start
            log.info("warm-up: the first %d step%s took %.2f s (compilation and first iterations); the steady "
                     "state's figures start after step %d", self.steps, "" if self.steps == 1 else "s",
                     self.warmup_s, step)
        if self.logs(step):
            self._log(step, epoch)

    def _log(self, step: int, epoch: int) -> None:
        (loss_sum,) = process_group.reduce([self.window_loss.item()])
        self.loss = loss_sum / self.d.world_size / self.window_steps
        self._restart_window()
        elapsed = time.perf_counter() - self.t_start
        rate = self.steps * self.global_batch / elapsed
        eta = (self.total_steps - step) * elapsed / self.steps
        if self.file:
            log.info("step %d/%d | epoch %d | loss %.4f | %.0f samples/s | data wait %.0f%% | ETA %ds",
                     step, self.total_steps, epoch, self.loss, rate, 100 * self.wait_s / self.step_s, eta)
            line = {"step": step, "of_steps": self.total_steps, "eta_s": round(eta, 1), "epoch": epoch,
                    "loss": self.loss, "samples_per_s": rate,
                    # the logged step's, before clipping (the same on every rank)
                    "grad_norm": None if self.grad_norm is None else self.grad_norm.item(),
                    "data_wait_frac": self.wait_s / self.step_s, "elapsed_s": elapsed, "time": time.time(),
                    **self.extra()}
            for sink in self.sinks:
                sink.log(step, line)
            if step == self.total_steps:   # written with the evaluation's figures, once they are known
                self._last = line
            else:
                self._write(line)

    def _write(self, line: dict) -> None:
        self.file.write(line)

    def exclude(self, seconds: float) -> None:
        """Keep `seconds` (an evaluation's) out of the training figures: they count from later starts."""
        self.t_start += seconds
        if self.t_steady is not None:
            self.t_steady += seconds

    def evaluated(self, step: int, epoch: int, evaluation: dict | None) -> None:
        """An evaluation's loss and metrics (eval_loss, eval_<name>): a metrics.jsonl line of their own,
        or, after the last step, that step's line; and eval/* curves."""
        if not evaluation or not self.file:
            return
        figures = {"eval_loss": evaluation["loss"],
                   **{f"eval_{name}": value for name, value in evaluation["metrics"].items()}}
        for sink in self.sinks:
            sink.log(step, figures)
        if self._last is not None and self._last["step"] == step:
            self._last.update(figures)
        else:
            self._write({"step": step, "epoch": epoch, **figures, "time": time.time()})

    def write_held(self) -> None:
        """The last step's line, held for the evaluation's figures, written now: before train.json says the run
        is trained, since a session that resumes at the last step trains and evaluates nothing again."""
        if self.file and self._last is not None:
            self._write(self._last)
            self._last = None

    def close(self) -> None:
        self.write_held()
        if self.file:
            self.file.close()
        if self.curves:
            self.curves.close()
