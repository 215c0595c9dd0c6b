"""The checkpoint writer: a process of its own that serializes, writes, fsyncs, hashes and promotes a
DDP checkpoint, fed through shared memory.

The training process only copies its state into shared-memory buffers (kept from one save to the
next) and hands their handles over a queue. A writer thread in the training process competes with
the training loop for the interpreter lock: a GPU's training thread, which must keep launching
kernels, then stalls (benchmarks/checkpoint.py measures both writers). The writer runs
at the lowest CPU priority (nice 19), so the training ranks win every core they want, and it dies
with the trainer (PR_SET_PDEATHSIG): a killed trainer leaves at most a temporary file behind, which
the next session removes, never a writer that renames files under a new session.
"""
from __future__ import annotations

import ctypes
import logging
import os
import queue
import signal
from pathlib import Path

import torch
import torch.multiprocessing as mp

log = logging.getLogger("airetrain.checkpoint.writer")

SHM = "/dev/shm"
PR_SET_PDEATHSIG = 1


def shm_free_bytes() -> int | None:
    """Free bytes of the shared-memory filesystem the buffers live in (None: not known here)."""
    try:
        st = os.statvfs(SHM)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def shared_buffer(like: torch.Tensor) -> torch.Tensor:
    """A CPU tensor in shared memory shaped like `like`; page-locked where `like` is on a GPU, so that
    the device-to-host copy runs at full speed and asynchronously."""
    buffer = torch.empty(like.shape, dtype=like.dtype).share_memory_()
    if like.device.type == "cuda" and buffer.numel():
        code = torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), buffer.numel() * buffer.element_size(), 0)
        if int(code) != 0:
            log.warning("cudaHostRegister of a checkpoint buffer failed (%s): the copy to it is slower", code)
    return buffer


def _die_with_parent(parent: int) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):   # not Linux: the daemon flag still ends it with a clean exit
        pass
    if os.getppid() != parent:   # the trainer died while this process was starting
        os._exit(0)


def _serve(jobs, results, parent: int) -> None:
    """The writer process: one job at a time, each answered with (True, durable entry) or (False, error)."""
    _die_with_parent(parent)
    os.nice(19)
    torch.set_num_threads(1)
    from . import store
    from .promote import promote

    while (job := jobs.get()) is not None:
        state, directory, step, fingerprint, keep, durable = job
        directory = Path(directory)
        try:
            entry = store.save_file(state, directory, step, fingerprint, keep)
            results.put((True, promote(entry, Path(durable), keep, full_check=False)))
        except BaseException as e:   # reported to the trainer at its next wait
            results.put((False, f"{type(e).__name__}: {e}"))
        del state, job


class Writer:
    """The trainer's side: start the process, hand it a job, wait for its answer, stop it."""

    def __init__(self):
        ctx = mp.get_context("spawn")   # never fork a process that holds gloo's and the loader's threads
        self._jobs, self._results = ctx.SimpleQueue(), ctx.Queue()
        self._proc = ctx.Process(target=_serve, args=(self._jobs, self._results, os.getpid()),
                                 name="airetrain-checkpoint-writer", daemon=True)
        self._proc.start()
        self._busy = False

    def submit(self, state: dict, directory: Path, step: int, fingerprint: str, keep, durable: Path) -> None:
        assert not self._busy, "one save at a time: wait() first"
        self._jobs.put((state, str(directory), step, fingerprint, keep, str(durable)))
        self._busy = True

    def wait(self) -> dict | None:
        """The durable entry of the job in flight once it is done (None: none was in flight)."""
        if not self._busy:
            return None
        self._busy = False
        while True:
            try:
                ok, value = self._results.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._proc.is_alive():
                    raise RuntimeError(f"the checkpoint writer process ended (exit code {self._proc.exitcode})") \
                        from None
        if not ok:
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        if self._proc.is_alive():
            self._jobs.put(None)
            self._proc.join(timeout=60)
