"""The trainer's checkpointer: when to save, saving in the background, promotion to scratch, resuming exactly.

    ckpt = Checkpointer(d, par, optimizer, plan, fast_root, fast_node_local, heartbeat=watchdog.beat)
    trainer = ckpt.restore()                  # None on a fresh start; every rank gets the trainer state
    ckpt.save_if_due(position, steps_per_epoch, session.trainer_state, now=best)   # after every step
    ckpt.save(trainer, blocking=True)         # now, and durable before it returns (a stop)
    ckpt.finish()                             # waits for the last write and its promotion

DDP: rank 0 writes one file. FSDP: torch.distributed.checkpoint writes each rank's shards, with
async_save on a gloo group of its own (on the default group it hangs while training goes on).
Training stalls only while the state is copied to CPU memory; the write, the fsyncs, the manifest
and the copy to scratch run in the background, one save at a time, so the newest checkpoint is on
scratch before the next one starts: DDP's in a writer process fed through shared memory or in a
thread (checkpoint/background.py decides which, from checkpoint.writer and the machine's free
cores), FSDP's in DCP's background thread. With checkpoint.async false the save is written in the
loop, from the live state.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict)

from . import background, store, writer
from .promote import promote
from ..records import Plan
from ..rundir.fingerprints import fingerprint
from ..roots import run_dir
from ..schedule import Position, SavePolicy

log = logging.getLogger("airetrain.checkpoint.manager")


def rng_state(device: torch.device) -> dict:
    """This process's random state, in types torch.load(weights_only=True) accepts."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _staging(like: torch.Tensor) -> torch.Tensor:
    """A buffer for a copy of `like` in this process: page-locked for a GPU's tensor, plain for a CPU's."""
    return torch.empty(like.shape, dtype=like.dtype, pin_memory=like.device.type == "cuda")


def cpu_copy(tree, buffers: dict, shared: bool = False, path: tuple = ()):
    """A copy of every tensor in CPU memory: the training step may change the originals at once.

    Into buffers kept in `buffers` from one save to the next: allocating a state-sized copy at every
    save costs a page fault per 4 KiB of it (the allocator hands blocks that large back to the kernel
    when they are freed), copying into kept buffers costs none. Shared memory for the writer process
    (shared), page-locked memory for a GPU's tensors (the copy is asynchronous: the caller
    synchronizes), else plain memory."""
    if isinstance(tree, torch.Tensor):
        buffer = buffers.get(path)
        if buffer is None or buffer.shape != tree.shape or buffer.dtype != tree.dtype:
            buffer = buffers[path] = (writer.shared_buffer if shared else _staging)(tree)
        return buffer.copy_(tree.detach(), non_blocking=tree.device.type == "cuda")
    if isinstance(tree, dict):
        return {k: cpu_copy(v, buffers, shared, (*path, k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(cpu_copy(v, buffers, shared, (*path, i)) for i, v in enumerate(tree))
    return tree


class Ranks(Protocol):
    """This process's place in the group, as the trainer's process group describes it."""
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool: ...


class Replicas(Protocol):
    """The model as the trainer wrapped it for DDP or FSDP, and how to read and load its full state."""
    model: torch.nn.Module
    strategy: str

    def full_state(self, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]: ...

    def load_full_state(self, optimizer: torch.optim.Optimizer, model_state: dict, optimizer_state: dict) -> None: ...


class Checkpointer:
    """The trainer's checkpointer (see the module's docstring); heartbeat is called after every save,
    so that the hang watchdog counts a long save as progress."""

    def __init__(self, d: Ranks, par: Replicas, optimizer: torch.optim.Optimizer, plan: Plan, fast_root: Path,
                 fast_node_local: bool, init_sha256: str | None = None,
                 heartbeat: Callable[[], None] = lambda: None):
        cfg = plan.config.checkpoint
        self.d, self.par, self.optimizer, self.heartbeat = d, par, optimizer, heartbeat
        self.sharded = par.strategy == "fsdp"
        self.durable = plan.checkpoints_dir
        self.fingerprint = fingerprint(plan.config, init_sha256)
        self.keep = cfg.keep
        self.path = background.choose(
            cfg.writer, cfg.async_, self.sharded, d.device.type == "cuda",
            background.cores_busy(plan.nproc_per_node, plan.cpus_per_rank, plan.config.data.workers),
            background.cores_here(), background.model_mb(par.model))
        self.background = self.path.background
        if d.is_main:
            log.info("checkpoints: %s (%s)", self.path.kind, self.path.reason)
        self.policy = SavePolicy.from_config(plan.config)
        fast = run_dir(fast_root, plan.run) / "checkpoints"
        # Every rank writes DCP shards: on node-local disks of a multi-node job they would be split
        # across nodes, so sharded checkpoints then go to scratch directly.
        self.dir = self.durable if self.sharded and fast_node_local and plan.nodes > 1 else fast
        if d.is_main:
            for directory in {self.dir, self.durable}:
                store.clean_partial(directory)
        self._group = dist.new_group(backend="gloo") if self.sharded and self.background else None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.latest: dict | None = None     # the newest checkpoint that is durable and verified
        self.stalls: list[float] = []       # seconds training waited per save, all in
        self.waits: list[float] = []        # ... of which waiting for the previous save to finish
        self._buffers: dict = {}            # staging buffers, reused: shared for the writer, page-locked for GPUs
        # DDP's background saves go to a writer process or a thread (checkpoint/background.py decides);
        # FSDP's to DCP's async_save
        self._writer = writer.Writer() if d.is_main and self.path.kind == background.PROCESS else None
        self._shared: bool | None = None   # decided at the first save, once the state's size is known

    # ---- saving
    def save_if_due(self, position: Position, steps_per_epoch: int, trainer_state, now: bool = False) -> bool:
        """Save (in the background) where the policy says this position is due, or now (the newest
        best); whether it did. A collective: every rank calls it after every step. trainer_state()
        gives the state to save."""
        if not (now or self.policy.due_at(position, steps_per_epoch)):
            return False
        self.save(trainer_state())
        return True

    def save(self, trainer: dict, blocking: bool = False) -> None:
        """Save the model, optimizer and trainer state. A collective: every rank calls it."""
        t0 = time.perf_counter()
        self.wait()
        self.waits.append(time.perf_counter() - t0)   # the previous save was still being written
        rngs = [None] * self.d.world_size
        dist.all_gather_object(rngs, rng_state(self.d.device))
        trainer = {**trainer, "rng": rngs, "fingerprint": self.fingerprint}
        if self.sharded:
            job = self._save_sharded(trainer)
        else:
            model_state, optim_state = self.par.full_state(self.optimizer)  # a collective
            job = None
            if self.d.is_main:   # the buffers are free: the previous save has finished (wait above)
                tree = {"model": model_state, "optimizer": optim_state, "trainer": trainer}
                shared = self._use_writer(tree)
                # a synchronous save writes the live state before training goes on: no copy needed
                state = cpu_copy(tree, self._buffers, shared) if self.background else tree
                if self.d.device.type == "cuda":
                    torch.cuda.synchronize(self.d.device)
                if shared:
                    self._writer.submit(state, self.dir, trainer["step"], self.fingerprint, self.keep, self.durable)
                else:
                    job = self._save_file(state)
        waited = time.perf_counter() - t0
        if job is not None:
            if self.background and not blocking:
                self._thread = threading.Thread(target=self._run, args=(job,), name="checkpoint", daemon=True)
                self._thread.start()
            else:
                self._run(job)
        in_loop = blocking or not self.background
        if in_loop:
            self.wait()   # raises at once where the write failed
        if blocking:
            dist.barrier()
        self.stalls.append(time.perf_counter() - t0 if in_loop else waited)
        self.heartbeat()

    def _use_writer(self, tree: dict) -> bool:
        """Whether this save goes to the writer process: where shared memory has room for the state
        (a container's /dev/shm may be small; a full one would kill the trainer with SIGBUS)."""
        if self._shared is None and self._writer is not None:
            need, free = store.tree_bytes(tree), writer.shm_free_bytes()
            self._shared = free is not None and free > 1.2 * need
            if not self._shared:
                log.warning("checkpoints are written by a thread: %s has %s MB free for a %.0f MB state",
                            writer.SHM, "?" if free is None else f"{free / 1e6:.0f}", need / 1e6)
                self._writer.close()
                self._writer = None
                self.path = background.WritePath(background.THREAD, f"{self.path.reason}; {writer.SHM} too small "
                                                                    "for the writer process")
        return bool(self._shared)

    def _save_file(self, state: dict):
        def job():
            self._promote(store.save_file(state, self.dir, state["trainer"]["step"], self.fingerprint, self.keep))
        return job

    def _save_sharded(self, trainer: dict):
        partial = self.dir / store.tmp_dir_name(trainer["step"])
        if self.d.is_main:
            store.remove(partial)   # a leftover of a killed save
            self.dir.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        state = {"model": get_model_state_dict(self.par.model),
                 "optimizer": get_optimizer_state_dict(self.par.model, self.optimizer)}
        if self.background:
            future = dcp.async_save(state, checkpoint_id=partial, process_group=self._group)
        else:
            dcp.save(state, checkpoint_id=partial)
            future = None

        def job():
            if future is not None:
                future.result()   # on rank 0: every rank's shards and the metadata are written
            if self.d.is_main:
                self._commit(store.commit_dir(partial, trainer, self.fingerprint))
        return job

    def _commit(self, entry: dict) -> None:
        """Record the checkpoint where it was written, then make it durable on scratch (rank 0)."""
        store.record(self.dir, entry, self.keep)
        self._promote(entry)

    def _promote(self, entry: dict) -> None:
        self.latest = promote(entry, self.durable, self.keep, full_check=False)
        log.debug("checkpoint step %d: %s (%.1f MB), durable at %s", entry["step"], entry["path"],
                  entry["size"] / 1e6, self.latest["path"])

    def _run(self, job) -> None:
        try:
            job()
        except BaseException as e:  # reported by the next wait(), in the training thread
            self._error = e

    def wait(self) -> None:
        """Wait for the save in flight; raise its error, if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._writer is not None:
            try:
                self.latest = self._writer.wait() or self.latest
            except RuntimeError as e:
                raise RuntimeError(self._failed(e)) from e
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(self._failed(error)) from error

    def _failed(self, error: BaseException) -> str:
        """What a failed save ends training with: the error, and what is left to resume from (a
        save never touches the checkpoints before it)."""
        latest = self.latest
        durable = latest and any(store.same(latest, e) for e in store.entries(self.durable))
        where = self.durable / latest["file"] if durable else (latest or {}).get("path")
        kept = (f"the newest {'durable ' if durable else ''}checkpoint, {where} (step {latest['step']}), is intact: "
                "run again to resume from it" if latest else "no checkpoint of this run is durable yet")
        return f"saving a checkpoint failed: {error}; {kept}"

    def finish(self) -> dict | None:
        """Every rank: the last save is written and durable. Returns its durable entry (rank 0)."""
        self.wait()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        dist.barrier()
        self.heartbeat()
        return self.latest

    # ---- resuming
    def restore(self) -> dict | None:
        """Load the newest checkpoint that verifies, on the fast root or on scratch; None if there is none.

        Rank 0 verifies and chooses (on a node-local fast root only its node sees the file) and
        sends the others the trainer state; DDP's weights follow by broadcast, FSDP's shards are
        read by every rank from the chosen directory."""
        found = store.load_latest([self.dir, self.durable], self.fingerprint) if self.d.is_main else None
        header = [None]
        if found:
            state, path, entry = found
            trainer = state if store.kind(entry) == store.DCP else state["trainer"]
            header = [{"trainer": trainer, "path": str(path), "kind": store.kind(entry),
                       "entry": {**entry, "path": str(path)}}]
        dist.broadcast_object_list(header, src=0)
        if header[0] is None:
            return None
        head = header[0]
        if head["kind"] == store.FILE:
            state = found[0] if self.d.is_main else {"model": {}, "optimizer": {}}
            self.par.load_full_state(self.optimizer, state["model"], state["optimizer"])
        else:
            state = {"model": get_model_state_dict(self.par.model),
                     "optimizer": get_optimizer_state_dict(self.par.model, self.optimizer)}
            dcp.load(state, checkpoint_id=head["path"])
            set_model_state_dict(self.par.model, state["model"])
            set_optimizer_state_dict(self.par.model, self.optimizer, state["optimizer"])
        trainer = head["trainer"]
        if len(trainer["rng"]) == self.d.world_size:
            set_rng_state(trainer["rng"][self.d.rank], self.d.device)
        else:
            log.warning("the checkpoint was written by %d ranks, this run has %d: random streams restart",
                        len(trainer["rng"]), self.d.world_size)
        self.latest = head["entry"]
        if self.d.is_main and self.dir != self.durable:
            self._catch_up(head["entry"], Path(head["path"]).parent == self.dir)
        log.info("resumed from %s (step %d, epoch %d)", head["path"], trainer["step"], trainer["epoch"])
        return trainer

    def _catch_up(self, resumed: dict, from_fast: bool) -> None:
        """Rank 0, in the background: every checkpoint the fast root's manifest keeps (the newest and
        the best) that scratch lacks is made durable now, not after the next save. A kill between
        writing and promoting leaves the newest only on the fast root; a run folder removed from
        scratch leaves all of them there, the best included, which the promote step needs."""
        durable = store.entries(self.durable)
        missing = [{**e, "path": str(self.dir / e["file"])} for e in store.entries(self.dir)
                   if e.get("fingerprint") == self.fingerprint and e["step"] < resumed["step"]
                   and not any(store.same(e, d) for d in durable)]
        newest = from_fast and not any(store.same(resumed, d) for d in durable)
        if not missing and not newest:
            return

        def job():
            for entry in missing:   # older ones, oldest first; one that no longer verifies is left
                try:
                    promote(entry, self.durable, self.keep, full_check=True)
                except store.CheckpointError as e:
                    log.warning("checkpoint step %d stays on the fast root only: %s", entry["step"], e)
            if newest:
                self._promote(resumed)
        self._thread = threading.Thread(target=self._run, args=(job,), name="checkpoint", daemon=True)
        self._thread.start()
