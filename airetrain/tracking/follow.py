"""A script's figures to the run's trackers: results/<run>/metrics.jsonl followed, from the launcher, as
the script appends to it (airetrain.job.log, the Lightning and HF callbacks), each complete line sent
through the same Sender as the built-in trainer's.

The file is read from its first line at every session: the Sender skips each figure at a step its
tracker already holds, so an earlier session's line that a kill kept from a tracker is sent now, and
no step is sent twice. The script's process imports no tracker.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

from .sender import Sender


class Follower:
    def __init__(self, path: Path, sender: Sender, every_s: float = 1.0):
        self.path, self.sender, self.every_s = Path(path), sender, every_s
        self._offset, self._partial = 0, b""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> int:
        """Send every complete line added since the last read; how many lines were sent."""
        try:
            with open(self.path, "rb") as f:
                if f.seek(0, 2) < self._offset:   # replaced: read it anew
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return 0
        self._offset += len(data)
        *complete, self._partial = (self._partial + data).split(b"\n")
        sent = 0
        for raw in complete:
            try:
                line = json.loads(raw)
            except ValueError:   # a line cut by a kill
                continue
            if isinstance(line, dict) and isinstance(line.get("step"), int) and not isinstance(line["step"], bool):
                self.sender.log(line["step"], line)
                sent += 1
        return sent

    def start(self) -> None:
        def follow():
            while not self._stop.wait(self.every_s):
                self.read()
        self._thread = threading.Thread(target=follow, name="airetrain-follow", daemon=True)
        self._thread.start()

    def finish(self) -> Sender:
        """Stop following, after the lines the script wrote last; the Sender, to close."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.read()
        return self.sender
