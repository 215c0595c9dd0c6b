"""The query: ONE `sacct` call for the accounting records of many jobs (report/jobs.py folds them).

The call is started (Started) before its answer is needed: `airetrain report --jobs` imports the code that
folds and prints the answer while slurmdbd looks the jobs up, which is most of the command's time."""
from __future__ import annotations

import tempfile
import threading
import time
from typing import TYPE_CHECKING

from ..cluster import slurm
from .sacct_fields import FIELDS

if TYPE_CHECKING:   # the fold is imported once the call is under way
    from .jobs import Job


def command(job_ids: list[str] | None = None, since: str | None = None) -> list[str]:
    """The one sacct call: every run of a requeued job (--duplicates), the report's fields."""
    return slurm.sacct_argv(FIELDS, job_ids, since)


UNAVAILABLE = "accounting unavailable"   # a row's status while sacct cannot answer for its job


class AccountingUnavailable(RuntimeError):
    """sacct is installed, but accounting does not answer (slurmdbd stopped, unreachable or stalled)."""


class Started:
    """A sacct call under way; result() folds its answer. No call where there is nothing to ask or no sacct
    (a laptop): the answer is then None."""

    def __init__(self, job_ids: list[str] | None = None, since: str | None = None, timeout: float = 60):
        self.ids = sorted({str(j) for j in job_ids or [] if j})
        self.timeout, self.deadline = timeout, time.monotonic() + timeout
        self.proc = None
        if not (self.ids or since):
            return
        # stderr to a file: a pipe of it left unread while stdout is read could fill and stall sacct
        self.errors = tempfile.TemporaryFile("w+")
        self.proc = slurm.start(command(self.ids, since), self.errors)
        if self.proc is None:   # no sacct here
            self.errors.close()

    def result(self) -> dict[str, Job] | None:
        """Every job's figures, each row folded as sacct prints it. Raises AccountingUnavailable where sacct
        fails or gives no answer within the timeout: a stalled slurmdbd keeps sacct waiting 45 s and more,
        never a reason for the caller to hang (the call is killed at the deadline)."""
        if self.proc is None:
            return None
        from .jobs import parse

        killed = threading.Event()

        def kill() -> None:
            killed.set()
            self.proc.kill()

        timer = threading.Timer(max(self.deadline - time.monotonic(), 0.0), kill)
        timer.start()
        try:
            jobs = parse(self.proc.stdout, self.ids)
            returncode = self.proc.wait()
        finally:
            timer.cancel()
            self.proc.stdout.close()
        with self.errors:
            self.errors.seek(0)
            said = [line.strip() for line in self.errors.read().splitlines() if line.strip()]
        if killed.is_set():
            raise AccountingUnavailable(f"sacct gave no answer within {self.timeout:g} s")
        if returncode != 0:
            raise AccountingUnavailable(said[-1] if said else f"sacct exited {returncode}")
        return jobs


def query(job_ids: list[str] | None = None, since: str | None = None,
          timeout: float = 60) -> dict[str, Job] | None:
    """Every job's figures from ONE sacct call; None where there is no sacct (a laptop). Raises
    AccountingUnavailable as Started.result does."""
    return Started(job_ids, since, timeout).result()
