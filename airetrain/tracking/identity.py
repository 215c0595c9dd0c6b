"""The tracker run of an airetrain run: one per run, however many sessions (requeues, kills, resumes)
its training takes, and a new one only when the run is retrained from step 0 (`airetrain restart`).

Its ids live in the run's durable directory (<scratch>/airetrain/<run>/tracking/run.json), not in
a session: every session reads them and continues the same tracker run. A generation (random, made
by the run's first session) tells a retrained run's tracker run from the one before; the W&B run id
is the run's name and that generation, so that it is chosen before anything is sent. MLflow
chooses its own run ids: the run is found by its tag `airetrain.generation` where a session died
between creating it and recording its id.

A run whose training changes (another config, other start weights: another checkpoint fingerprint)
trains from step 0 beside its old checkpoints: its tracker run is then a new one too, and the old
one superseded, as after a restart.
"""
from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from ..fsutil import read_json, write_json_atomic

DIRECTORY = "tracking"     # in the run's durable directory: run.json, W&B's offline files, what sync sent
RECORD = "run.json"


def directory(durable_dir: Path) -> Path:
    return Path(durable_dir) / DIRECTORY


class Identity:
    """The run's tracker ids, read from (and written to) <durable_dir>/tracking/run.json."""

    def __init__(self, durable_dir: Path, run: str, fingerprint: str | None = None):
        """fingerprint: the checkpoints' of this session (the trainer's); one that differs from the
        recorded one starts a new tracker run. None (the promote step): the recorded run."""
        self.path = directory(durable_dir) / RECORD
        self.run = run
        self.data = recorded(durable_dir)
        if fingerprint and self.data.get("fingerprint") not in (None, fingerprint):
            supersede(durable_dir)
            self.data = recorded(durable_dir)
        new = {} if self.data.get("generation") else {"generation": secrets.token_hex(4), "created": time.time()}
        if fingerprint and self.data.get("fingerprint") != fingerprint:
            new["fingerprint"] = fingerprint
        if new:
            self.data = {**self.data, **new}
            self.save()

    @property
    def generation(self) -> str:
        return self.data["generation"]

    @property
    def wandb_id(self) -> str:
        """W&B's run id: the run's name (what W&B allows of it) and the generation, at most 64 characters."""
        name = re.sub(r"[^A-Za-z0-9_-]", "_", self.run)[:55]
        return f"{name}-{self.generation}"

    def of(self, tracker: str) -> dict:
        """What a tracker was told of this run (its ids, whether the opening was sent), {} before."""
        return dict(self.data.get(tracker) or {})

    def set(self, tracker: str, **fields) -> None:
        self.data = {**self.data, tracker: {**self.of(tracker), **fields}}
        self.save()

    @property
    def superseded(self) -> list[dict]:
        """The tracker runs of this run's earlier trainings (before a restart)."""
        return list(self.data.get("superseded") or [])

    def mark_tagged(self, tracker: str) -> None:
        """Every superseded run of tracker has been tagged as such."""
        self.data = {**self.data, "superseded": [{**s, f"{tracker}_tagged": True} for s in self.superseded]}
        self.save()

    def save(self) -> None:
        write_json_atomic(self.path, self.data)


def supersede(durable_dir: Path) -> bool:
    """A restart: the run's current tracker run becomes superseded (kept, and tagged so by the next
    training's first session); the next session starts a new one. False: there was none."""
    path = directory(durable_dir) / RECORD
    if not path.exists():
        return False
    data = read_json(path)
    current = {k: v for k, v in data.items() if k != "superseded"}
    if not current.get("generation"):
        return False
    write_json_atomic(path, {"superseded": [*(data.get("superseded") or []), {**current, "superseded": time.time()}]})
    return True


def recorded(durable_dir: Path) -> dict:
    """The run's tracker ids as recorded (for the results table), {} where it has none."""
    path = directory(durable_dir) / RECORD
    return read_json(path) if path.exists() else {}
