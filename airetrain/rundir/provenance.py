"""Which code a run ran: a project's git state, and airetrain's own version and commit."""
from __future__ import annotations

import subprocess
from pathlib import Path

# The folder above the package: a source checkout of airetrain has its pyproject.toml there; an
# installed one (a wheel in site-packages) has none, and then only its version says what it is.
SOURCE = Path(__file__).resolve().parents[2]   # airetrain/rundir/provenance.py: the checkout


def git_state(directory: str | Path) -> dict:
    """A folder's commit and whether its tracked files differ from it (None outside git)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode:
            return {"commit": None, "dirty": None}
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
        return {"commit": head.stdout.strip(), "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def airetrain_state() -> dict:
    """airetrain's version, and its checkout's commit and dirty flag (None when installed from a wheel:
    a virtual environment inside the user's own repository would otherwise lend it the project's commit)."""
    from .. import __version__

    checkout = (SOURCE / "pyproject.toml").is_file() and (SOURCE / ".git").exists()
    state = git_state(SOURCE) if checkout else {"commit": None, "dirty": None}
    return {"version": __version__, **state}
