"""The user's code, loaded by import path ('package.module:function'): their model, dataset, loss,
forward, metrics, optimizer and schedule all come through here.

The run's captured code (capture.py: $AIRETRAIN_CODE) comes first on the path, so a resumed session
imports what the run first trained with, never an edited working tree; then the working directory,
where a user's package usually lies.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path


def import_callable(path: str):
    """'package.module:function' -> the function (imported from the working directory too)."""
    module, _, attr = path.partition(":")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    captured = os.environ.get("AIRETRAIN_CODE")   # the run's captured code comes before the working tree
    if captured and sys.path[0] != captured:
        sys.path.insert(0, captured)
    return getattr(importlib.import_module(module), attr)
