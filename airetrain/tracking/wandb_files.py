"""The history in W&B's offline files, read without W&B's service: what a resumed session skips, and
what `airetrain sync` and the tests check.

W&B ships no reader of its own (its internal process is written in Go). A run's offline session is
a folder offline-run-<time>-<id>/ holding run-<id>.wandb: a 7-byte W&B header, then a LevelDB-style
log of 32 KiB blocks, each record a 7-byte header (CRC-32C, length, type: whole, first, middle or
last part) and a part of a protobuf `Record` (wandb.proto.wandb_internal_pb2). Only the framing is
read here; the records are W&B's own protobuf classes. A file cut short by a kill ends at its last
whole record.
"""
from __future__ import annotations

import json
import re
import struct
import time
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7            # the file's W&B header, and each record's
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# a session's folder: offline-run-<time>-<run id>, and where a session of the run already started in that second,
# W&B's -<n> after it (a run id may hold dashes too: the id is the one of the run-<id>.wandb file inside)
SESSION = re.compile(r"^offline-run-(?P<time>\d{8}_\d{6})-(?P<rest>[A-Za-z0-9_-]+)$")


def raw_records(path: Path):
    """Each record's bytes, in order."""
    data = Path(path).read_bytes()
    if not data.startswith(b":W&B"):
        raise ValueError(f"{path} is not a W&B offline file")
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:   # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0 and length == 0:
            break
        chunk = data[pos + HEADER:pos + HEADER + length]
        if len(chunk) < length:
            break   # cut short by a kill
        pos += HEADER + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            parts = chunk
        elif kind == MIDDLE:
            parts += chunk
        elif kind == LAST:
            yield parts + chunk
            parts = b""


def records(path: Path):
    """Each record as W&B's protobuf Record."""
    from wandb.proto import wandb_internal_pb2

    for raw in raw_records(path):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(raw)
        except Exception:
            break   # a torn last record
        yield record


def sessions(wandb_dir: Path, run_id: str) -> list[Path]:
    """A run's offline session files under a W&B folder (WANDB_DIR/wandb), oldest first."""
    found = []
    for folder in Path(wandb_dir).glob("offline-run-*"):
        m = SESSION.match(folder.name)
        file = folder / f"run-{run_id}.wandb"
        if m and (m["rest"] == run_id or m["rest"].startswith(f"{run_id}-")) and file.exists():
            suffix = m["rest"][len(run_id) + 1:]
            found.append(((m["time"], int(suffix) if suffix.isdigit() else 0), file))
    return [file for _, file in sorted(found)]


def run_id_of(folder: Path) -> str | None:
    """The run id of a session's folder: its run-<id>.wandb file's."""
    return next((f.name[4:-6] for f in Path(folder).glob("run-*.wandb")), None)


def await_own_folder(wandb_dir: Path, run_id: str) -> None:
    """Returns in a second no session of run_id started in. W&B names an offline session's folder by the
    (local) second it starts, and a second session in that second gets the name with -1 after it: each
    session's folder then says plainly when it started, in order. Waits a second at most."""
    while (Path(wandb_dir) / f"offline-run-{time.strftime('%Y%m%d_%H%M%S')}-{run_id}").exists():
        time.sleep(0.05)


def history(path: Path) -> list[dict]:
    """The history rows of one session file: {name: value} with W&B's _step, oldest first."""
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def last_steps(wandb_dir: Path, run_id: str) -> dict[str, int]:
    """{name: the last step any session logged it at}, over the run's offline sessions."""
    held: dict[str, int] = {}
    for path in sessions(wandb_dir, run_id):
        for row in history(path):
            step = int(row.get("_step", -1))
            for name in row:
                if not name.startswith("_"):
                    held[name] = max(held.get(name, -1), step)
    return held


def config(path: Path) -> dict:
    """The config a session file records (its run record's, and later updates)."""
    out: dict = {}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        for item in updates:
            out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out
