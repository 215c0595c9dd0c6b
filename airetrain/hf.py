"""airetrain.hf: a Hugging Face Trainer on the cluster with one callback. The deadline (the job's end
less checkpoint.stop_margin_min, or SIGTERM) saves a checkpoint on every rank and stops the training,
the job requeues, and the next session resumes from the newest checkpoint that verifies:

    from airetrain.hf import Airetrain
    trainer = Trainer(model, args, train_dataset=..., callbacks=[Airetrain()])
    trainer.train(resume_from_checkpoint=Airetrain.resume_path())      # None on a first start

Where args.output_dir was left unset (transformers then uses "trainer_output"), the Trainer's
checkpoint-N/ folders go to AIRETRAIN_CHECKPOINT_DIR, and the launcher makes them durable on scratch.
The Trainer's own resume is exact: it restores the optimizer, the schedule, every rank's random
states, and skips the batches of the epoch it had trained.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("airetrain.hf needs the Hugging Face Trainer, which is not installed here: "
                      "pip install 'transformers[torch]' (or: pip install 'airetrain[hf]')") from None

from . import job
from .checkpoint.mirror import verify

DEFAULT_OUTPUT_DIR = "trainer_output"   # transformers' output_dir when none is given


def _complete(folder: Path, durable: bool) -> bool:
    """A checkpoint-N folder the Trainer finished (trainer_state.json is written last), and, for a
    durable copy, every file as the launcher recorded it (sha256)."""
    try:
        json.loads((folder / "trainer_state.json").read_text())
        return not durable or bool(verify(folder.parent, folder.name))
    except (OSError, ValueError):
        return False


class Airetrain(TrainerCallback):
    def __init__(self):
        self.stopped_at: int | None = None
        self._t0: float | None = None
        self._steps0 = 0

    @staticmethod
    def resume_path() -> str | None:
        """The newest checkpoint-N folder that verifies, on the fast root (this job's, on one node) or on
        scratch (a requeued job's fast root is new and empty; on several nodes, the one every rank
        sees); None on a first start."""
        durable = job.durable_dir()
        found = [(int(p.name.split("-")[1]), i, p) for i, root in enumerate(job.resume_dirs())
                 if root.is_dir() for p in root.glob("checkpoint-*") if p.name.split("-")[1].isdigit()
                 and _complete(p, root == durable)]
        newest = min(found, key=lambda f: (-f[0], f[1])) if found else None
        job.note_resume(newest and newest[0], newest and str(newest[2]))
        return str(newest[2]) if newest else None

    def on_init_end(self, args, state, control, **kwargs):
        if Path(args.output_dir).name == DEFAULT_OUTPUT_DIR and not Path(args.output_dir).is_absolute():
            default, args.output_dir = Path(args.output_dir), str(job.checkpoint_dir())
            try:   # the Trainer made it before any callback ran; nothing goes there now
                default.rmdir()
            except OSError:   # not there, or not empty: the user's files stay
                pass
        if epochs := job.max_epochs():   # a search's rung: it trains to its epochs, then the study decides
            args.num_train_epochs, args.max_steps = epochs, -1

    def on_train_begin(self, args, state, control, **kwargs):
        self._t0, self._steps0 = time.perf_counter(), state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        if job.should_stop():   # every rank, every step: the ranks agree
            control.should_save = control.should_training_stop = True
            self.stopped_at = state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        steps = state.global_step - self._steps0
        seconds = time.perf_counter() - self._t0 if self._t0 else 0.0
        samples = steps * args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        figures = {"step": state.global_step, "of_steps": state.max_steps, "epoch": state.epoch,
                   **({"loss": logs["loss"]} if "loss" in logs else {}),
                   **({"lr": logs["learning_rate"]} if "learning_rate" in logs else {}),
                   **({"grad_norm": logs["grad_norm"]} if "grad_norm" in logs else {}),
                   **({"samples_per_s": samples / seconds} if steps and seconds else {}),
                   **{k: v for k, v in logs.items() if k.startswith("eval_") and isinstance(v, (int, float))}}
        job.log(figures)

    def on_train_end(self, args, state, control, **kwargs):
        if self.stopped_at is not None:   # the checkpoint is saved: requeue, and the next session resumes
            job.stop_and_requeue(self.stopped_at, state.max_steps)
