"""airetrain.lightning: a Lightning script on the cluster with one callback. The deadline (the job's end
less checkpoint.stop_margin_min, or SIGTERM) saves a checkpoint on every rank and leaves `fit`, the job
requeues, and the next session resumes from the newest checkpoint that verifies:

    from airetrain.lightning import Airetrain
    trainer = L.Trainer(callbacks=[Airetrain()], ...)      # everything else as you have it
    trainer.fit(model, datamodule=dm, ckpt_path=Airetrain.resume_path())   # None on a first start

- The world: Lightning trains in torchrun's. Where `devices` and `num_nodes` are left unset, they
  become the plan's (Lightning reads PL_TRAINER_DEVICES and PL_TRAINER_NUM_NODES as their defaults);
  values that disagree with the plan fail at the start, naming both. Lightning's TorchElastic
  environment, not its SLURM one, reads the ranks.
- Checkpoints: ModelCheckpoint's files (last.ckpt, the best by its monitor) go to AIRETRAIN_CHECKPOINT_DIR
  where you gave no dirpath, as does the deadline's step-<N>.ckpt; the launcher makes them durable.
- Lightning's resume restores the model, the optimizers, the schedules and the loops' counters. From
  a checkpoint saved mid-epoch, the epoch goes on where it stopped: the sampler skips its batches trained
  before the stop (docs/script-mode.md).
"""
from __future__ import annotations

import itertools
import os
import re
import time
import zipfile
from pathlib import Path

try:
    import lightning.pytorch as pl
except ImportError:
    raise ImportError("airetrain.lightning needs Lightning, which is not installed here: pip install lightning "
                      "(or: pip install 'airetrain[lightning]')") from None

from . import job

_STEP = re.compile(r"step[-=](\d+)")


def _claim_world() -> None:
    """torchrun's world as the Trainer's defaults (before the Trainer is made: the callback is built first)."""
    world, local = os.environ.get("WORLD_SIZE"), os.environ.get("LOCAL_WORLD_SIZE")
    if world and local:
        os.environ.setdefault("PL_TRAINER_DEVICES", local)
        os.environ.setdefault("PL_TRAINER_NUM_NODES", str(int(world) // int(local)))


def _verifies(path: Path) -> bool:
    """A torch.save file whose every member's CRC checks out: written whole (no unpickling needed)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (OSError, zipfile.BadZipFile):
        return False


def _batch_size(batch) -> int | None:
    """Samples in a batch of any shape: its first tensor's first dimension."""
    if hasattr(batch, "shape"):
        return int(batch.shape[0]) if batch.shape else None
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    return next((n for n in map(_batch_size, items) if n), None)


def _epochs_trained(trainer) -> float:
    """The epochs trained at a validation: a whole number at an epoch's end (what a search reports at), a
    fraction where validation runs inside an epoch (val_check_interval)."""
    batches = trainer.num_training_batches
    done = trainer.fit_loop.epoch_loop.batch_progress.current.completed
    if not batches or batches == float("inf") or trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
        return trainer.current_epoch + 1
    return trainer.current_epoch + done / batches


class _Skipping:
    """A sampler's indices after its first `skip`: a resumed epoch's, whose batches before the stop were trained."""

    def __init__(self, sampler, skip: int):
        self.sampler, self.skip = sampler, skip

    def __iter__(self):
        return itertools.islice(iter(self.sampler), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.sampler) - self.skip)


class Airetrain(pl.Callback):
    def __init__(self):
        _claim_world()
        self.stopped_at: int | None = None
        self._logged = -1
        self._t0 = time.perf_counter()
        self._batches = 0   # this session's, counted each batch; their samples only at a log line

    @staticmethod
    def resume_path() -> str | None:
        """The newest .ckpt that verifies, on the fast root (this job's, on one node) or on scratch (a
        requeued job's fast root is new and empty; on several nodes, the one every rank sees), by the
        step its name carries (step-N, Lightning's epoch=E-step=N); last.ckpt where none does. None on
        a first start."""
        found = {}
        for root in reversed(job.resume_dirs()):   # the fast root's copy wins a tie
            if root.is_dir():
                found.update({p.name: p for p in root.rglob("*.ckpt")})
        # at one step, the deadline's own save (saved inside the epoch, where the stop came) before the
        # save ModelCheckpoint makes as the stopped epoch ends (which resumes as if that epoch were done)
        ranked = sorted(found.values(), key=lambda p: (int(m[1]) if (m := _STEP.search(p.name)) else -1,
                                                       p.name.startswith("step-"), p.stat().st_mtime), reverse=True)
        path = next((p for p in ranked if _verifies(p)), None)
        job.note_resume(int(m[1]) if path and (m := _STEP.search(path.name)) else None, path and str(path))
        return str(path) if path else None

    def setup(self, trainer, pl_module, stage):
        world = int(os.environ.get("WORLD_SIZE", trainer.world_size))
        if trainer.world_size != world:
            local = os.environ.get("LOCAL_WORLD_SIZE", "?")
            raise RuntimeError(f"airetrain launched {world} ranks ({local} per node on {world // int(local)} nodes), "
                               f"but this Trainer has devices={trainer.num_devices}, num_nodes={trainer.num_nodes} "
                               f"(world {trainer.world_size}): leave devices and num_nodes unset, and airetrain "
                               "sets them from the plan")
        for callback in trainer.checkpoint_callbacks:
            if callback.dirpath is None:
                callback.dirpath = str(job.checkpoint_dir())
        if epochs := job.max_epochs():   # a search's rung: it trains to its epochs, then the study decides
            trainer.fit_loop.max_epochs = epochs
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        # every batch: a count and the stop check, nothing more (the line's figures only at a log step)
        step = trainer.global_step
        self._batches += 1
        if step != self._logged and step % trainer.log_every_n_steps == 0:
            self._logged = step
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            seconds = time.perf_counter() - self._t0
            samples = self._batches * (_batch_size(batch) or 0) * trainer.world_size   # batches of one size
            job.log({"step": step, "of_steps": trainer.estimated_stepping_batches, "epoch": trainer.current_epoch,
                     **({"loss": float(loss)} if loss is not None else {}),
                     **({"samples_per_s": samples / seconds} if seconds else {})})
        if job.should_stop():   # every rank, every batch: the ranks agree
            trainer.save_checkpoint(job.checkpoint_dir() / f"step-{step:08d}.ckpt")
            trainer.should_stop = True
            self.stopped_at = step

    def on_train_start(self, trainer, pl_module):
        """A session resumed from the deadline's save, made inside an epoch: Lightning goes on with that epoch (no
        epoch start) but restarts its data from the first batch, since a plain DataLoader keeps no position; its
        sampler skips the batches trained before the stop (the saved batch was processed, not yet completed), so
        the epoch goes on where it stopped, as an uninterrupted run's would. A stateful loader resumes itself."""
        loader = trainer.train_dataloader
        batches = getattr(loader, "batch_sampler", None)
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        if getattr(trainer.fit_loop, "restarted_mid_epoch", False) and done and batches is not None \
                and getattr(batches, "sampler", None) is not None and batches.batch_size \
                and not hasattr(loader, "load_state_dict"):
            self._skipped = (batches, batches.sampler)
            batches.sampler = _Skipping(batches.sampler, done * batches.batch_size)

    def on_train_epoch_end(self, trainer, pl_module):
        if skipped := getattr(self, "_skipped", None):   # the next epochs whole
            skipped[0].sampler, self._skipped = skipped[1], None

    def on_validation_end(self, trainer, pl_module):
        figures = {f"eval_{k.removeprefix('val_').removeprefix('val/')}": float(v)
                   for k, v in trainer.callback_metrics.items() if k.startswith(("val_", "val/"))}
        if figures and not trainer.sanity_checking:
            job.log({"step": trainer.global_step, "epoch": _epochs_trained(trainer), **figures})

    def on_fit_end(self, trainer, pl_module):
        if self.stopped_at is not None:   # the checkpoint is saved: requeue, and the next session resumes
            job.stop_and_requeue(self.stopped_at, int(trainer.estimated_stepping_batches))
