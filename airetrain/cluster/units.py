"""SLURM's units, read and written in one place: durations and memory sizes, and sizes as people write them.

Durations as squeue and sacct print them: [D-]HH:MM:SS, MM:SS, either with .mmm, or a word
(UNLIMITED, NOT_SET, INVALID, Partition_Limit) where there is no duration. Sizes as sacct prints
them: 411280K, 1.5G, 4000M, 4000Mn (per node), 2000Mc (per core); SLURM's M is a MiB.
"""
from __future__ import annotations

import re
from functools import lru_cache

from ..errors import ConfigError

SIZE_UNITS_MB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2, "P": 1024.0 ** 3}
_DURATION = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")
_SIZE = re.compile(r"([\d.]+)([KMGTP]?)[nc]?")


# A report of thousands of jobs reads the same few time limits and elapsed times again and again: each text
# is parsed once (the answers are numbers, which no caller can change).
@lru_cache(maxsize=8192)
def duration_s(text: str | None) -> float | None:
    """Seconds of a SLURM duration, or None where it is not one (UNLIMITED, NOT_SET, '', ...)."""
    m = _DURATION.fullmatch((text or "").strip())
    if not m:
        return None
    days, hours, minutes = (int(g or 0) for g in m.groups()[:3])
    return ((days * 24 + hours) * 60 + minutes) * 60 + float(m.group(4))


def format_duration(seconds: float) -> str:
    """A duration sbatch accepts: HH:MM:SS, or D-HH:MM:SS from a day on (whole seconds, rounded up)."""
    whole = int(-(-seconds // 1))
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


@lru_cache(maxsize=8192)
def size_mb(text: str | None) -> float:
    """MB (MiB) of a SLURM size; a bare number is MB; anything else is 0."""
    m = _SIZE.fullmatch(text or "")
    return float(m.group(1)) * SIZE_UNITS_MB.get(m.group(2) or "M", 1.0) if m else 0.0


def size_bytes(text: str, what: str) -> int:
    """A size as people write it: 512MB, 1.5GB, 64k (decimal units, as tar and ls -h --si)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKMGT]?)B?\s*", text)
    if not m:
        raise ConfigError(f"{what} {text!r}: give a size such as 512MB, 2GB or 100k")
    value = float(m.group(1)) * 1000 ** " KMGT".index(m.group(2).upper() or " ")
    if value < 1:
        raise ConfigError(f"{what} {text!r}: a shard holds at least one byte")
    return int(value)
