"""`airetrain sync`: each run's offline W&B sessions uploaded from the login node, with W&B's own
`wandb sync`, as one W&B run per run: the sessions of one run id in the order they started (W&B
resumes the run for each), each step once (the trainer skipped what earlier sessions held).

What was uploaded is recorded in <scratch>/airetrain/<run>/tracking/wandb-synced.json (each session
folder, at the size it had), so a second call uploads nothing new, and a session that was still
being written is uploaded again once it has grown. Without credentials or a network it stops
before uploading, with the reason; no file is ever removed.
"""
from __future__ import annotations

import netrc
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import ConfigError
from ..fsutil import read_json, write_json_atomic
from .identity import directory, recorded
from .wandb_files import sessions
from .wandb_sink import wandb_root

SYNCED = "wandb-synced.json"
DEFAULT_HOST = "https://api.wandb.ai"


@dataclass(frozen=True)
class Upload:
    """One W&B run's sessions that are not uploaded yet, of one airetrain run."""
    run: str
    run_id: str
    project: str
    entity: str | None
    sessions: list[Path]     # oldest first

    @property
    def bytes(self) -> int:
        return sum(f.stat().st_size for s in self.sessions for f in s.rglob("*") if f.is_file())


def size(session: Path) -> int:
    """A session's size as sync records it: its .wandb file's, which grows while it is written."""
    return sum(f.stat().st_size for f in session.glob("*.wandb"))


def pending(run: str, durable_dir: Path) -> list[Upload]:
    """The run's W&B runs (its own, and those of trainings a restart superseded) with sessions not
    uploaded, or grown since."""
    ids = recorded(durable_dir)
    known = [ids, *ids.get("superseded", [])]
    projects = {(k.get("wandb") or {}).get("id"): k["wandb"] for k in known if (k.get("wandb") or {}).get("id")}
    done, folder = synced(durable_dir), wandb_root(durable_dir) / "wandb"
    out = []
    for run_id, project in projects.items():
        new = [f.parent for f in sessions(folder, run_id) if done.get(f.parent.name) != size(f.parent)]
        if new:
            out.append(Upload(run, run_id, project["project"], project.get("entity"), new))
    return out


def synced(durable_dir: Path) -> dict[str, int]:
    path = directory(durable_dir) / SYNCED
    return read_json(path) if path.exists() else {}


def host() -> str:
    return os.environ.get("WANDB_BASE_URL") or DEFAULT_HOST


def check_credentials() -> None:
    """W&B's API key in WANDB_API_KEY or ~/.netrc, for the server's host (never read beyond that)."""
    if os.environ.get("WANDB_API_KEY"):
        return
    name = urlsplit(host()).hostname or ""
    try:
        if netrc.netrc().authenticators(name):
            return
    except (OSError, netrc.NetrcParseError):
        pass
    raise ConfigError(f"no W&B credentials for {name}: run `wandb login` on this node, or set WANDB_API_KEY; "
                      "nothing was uploaded, and every offline file is kept")


def check_network(timeout_s: float = 10.0) -> None:
    """The server answers a connection (the login node reaches it; a compute node may not)."""
    parts = urlsplit(host())
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as error:
        raise ConfigError(f"W&B's server {host()} cannot be reached from here ({error}): run `airetrain sync` on a "
                          "node with internet (the login node); nothing was uploaded, and every offline file is kept")


def upload(item: Upload, timeout_s: float) -> None:
    """wandb sync of one W&B run's sessions, in order, then recorded as uploaded."""
    wandb = shutil.which("wandb", path=str(Path(sys.executable).parent)) or shutil.which("wandb") or "wandb"
    command = [wandb, "sync", "--id", item.run_id, "--project", item.project, "--include-synced",
               *(["--entity", item.entity] if item.entity else []), *map(str, item.sessions)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"wandb sync of run {item.run} ({item.run_id}) did not finish in {timeout_s:.0f} s; "
                          "nothing was recorded as uploaded, and every offline file is kept: run airetrain sync again")
    if done.returncode:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise ConfigError(f"wandb sync of run {item.run} ({item.run_id}) failed (exit {done.returncode}):\n{tail}\n"
                          "every offline file is kept: run airetrain sync again")
    record_uploaded(item)


def record_uploaded(item: Upload) -> None:
    """Each session of item as uploaded, at its size now: a later call uploads only what is new."""
    durable_dir = item.sessions[0].parents[3]   # <durable>/tracking/wandb/wandb/<session>
    uploaded = {**synced(durable_dir), **{s.name: size(s) for s in item.sessions}}
    write_json_atomic(directory(durable_dir) / SYNCED, uploaded)


def describe(item: Upload) -> str:
    where = f"{item.entity}/{item.project}" if item.entity else item.project
    return (f"{item.run}: W&B run {item.run_id} in {where}, {len(item.sessions)} session"
            f"{'' if len(item.sessions) == 1 else 's'} ({item.bytes / 1e6:.1f} MB)")


def sync(plans: dict, names: list[str], dry_run: bool = False, timeout_s: float = 1800.0, out=print) -> int:
    """Upload the named runs' (all runs': none named) offline W&B sessions not uploaded yet; the W&B runs
    uploaded (or, dry_run, that would be)."""
    from ..text import did_you_mean

    unknown = [n for n in names if n not in plans]
    if unknown:
        raise ConfigError(f"sync: unknown run {', '.join(f'{n!r}{did_you_mean(n, plans)}' for n in unknown)}; "
                          f"runs: {', '.join(plans)}")
    items = [item for name in (names or plans) for item in pending(name, plans[name].durable_dir)]
    if not items:
        offline = [n for n in (names or plans) if (w := plans[n].config.tracking.wandb) and w.mode == "offline"]
        out("nothing to upload: every offline W&B session of these runs is uploaded" if offline else
            "nothing to upload: none of these runs logs to W&B offline (tracking: wandb: {mode: offline})")
        return 0
    if dry_run:
        out("\n".join(["would upload:", *(f"  {describe(i)}" for i in items)]))
        return len(items)
    check_credentials()
    check_network()
    for item in items:
        upload(item, timeout_s)
        out(f"uploaded {describe(item)}")
    return len(items)
