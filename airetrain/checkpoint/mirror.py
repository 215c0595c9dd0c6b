"""Script mode: whatever a user's script writes to its checkpoint directory, made durable on scratch.

A file is copied once it has stayed the same (size and modification time) for one poll, through
copy_atomic (temporary name, fsync, rename) and checked against the sha256 of its source; a file
still being written is left for the next poll. MIRROR_INDEX in the durable directory lists every
copied file with its size and sha256, and is written after the copy it names.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..fsutil import copy_atomic, read_json, sha256_file, write_json_atomic

MIRROR_INDEX = "mirror.json"
log = logging.getLogger("airetrain.mirror")


def _skipped(rel: Path) -> bool:
    """Temporary files (ours and the usual conventions) and hidden files are not checkpoints."""
    return any(part.startswith(".") for part in rel.parts) or rel.suffix in (".tmp", ".partial")


class Mirror:
    def __init__(self, src: Path, durable: Path, every_s: float = 2.0):
        self.src, self.durable, self.every_s = Path(src), Path(durable), every_s
        index = self.durable / MIRROR_INDEX
        self.files: dict[str, dict] = read_json(index)["files"] if index.exists() else {}
        self._seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sync(self, settled_only: bool = True) -> int:
        """Copy every new or changed file (with settled_only, only those unchanged since the last
        poll); returns how many were copied."""
        copied = 0
        for path in sorted(p for p in self.src.rglob("*") if p.is_file()):
            rel = path.relative_to(self.src)
            if _skipped(rel):
                continue
            try:
                st = path.stat()
            except FileNotFoundError:   # removed by the script meanwhile
                continue
            key, stamp = str(rel), (st.st_size, st.st_mtime_ns)
            settled = self._seen.get(key) == stamp
            self._seen[key] = stamp
            done = self.files.get(key)
            if done and (done["size"], done["mtime_ns"]) == stamp or (settled_only and not settled):
                continue
            try:
                digest = copy_atomic(path, self.durable / rel, expected_sha256=sha256_file(path))
            except (OSError, FileNotFoundError) as e:   # changed while copied: the next poll retries
                log.info("not yet durable: %s (%s)", rel, e)
                continue
            self.files[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
            write_json_atomic(self.durable / MIRROR_INDEX, {"files": self.files})
            copied += 1
        return copied

    def start(self) -> None:
        def poll():
            while not self._stop.wait(self.every_s):
                try:
                    self.sync()
                except Exception as e:  # never let the mirror kill the run; the final sync reports
                    log.warning("checkpoint mirror: %s", e)
        self._thread = threading.Thread(target=poll, name="mirror", daemon=True)
        self._thread.start()

    def finish(self) -> dict:
        """Stop polling, copy everything now (the script has exited) and verify every durable copy."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.sync(settled_only=False)
        return verify(self.durable)


def verify(durable: Path, under: str | None = None) -> dict:
    """The mirror's durable files (under: those in that folder of it), each hashed again against
    MIRROR_INDEX; raises if one differs."""
    index = Path(durable) / MIRROR_INDEX
    files = read_json(index)["files"] if index.exists() else {}
    files = {rel: e for rel, e in files.items() if under is None or Path(rel).parts[0] == under}
    for rel, entry in files.items():
        if sha256_file(Path(durable) / rel) != entry["sha256"]:
            raise OSError(f"{Path(durable) / rel}: sha256 does not match {MIRROR_INDEX} (corrupt or changed)")
    return files
