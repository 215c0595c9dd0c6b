"""Text for people: aligned columns, sizes and durations as a person reads them.

SLURM's own formats (what sbatch reads, what sacct prints) are in units.py.
"""
from __future__ import annotations


def aligned(table: list[list[str]], rule: bool = False) -> list[str]:
    """The rows (the header first) in left-aligned columns two spaces apart; rule: dashes under the header."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    if rule:
        table = [table[0], ["-" * w for w in widths], *table[1:]]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines: the header, its rule, a line per row (cells as given)."""
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |",
            *("| " + " | ".join(cells) + " |" for cells in rows)]


def human_mb(mb: float) -> str:
    """MB as seff prints memory: GB (of 1024 MB) with two decimals from 1 GB on, else whole MB."""
    return f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def human_bytes(n: float) -> str:
    """Bytes in decimal units, as tar and `ls -h --si` show them: 512 B, 1.5 kB, 2.0 GB."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError


def clock(seconds: float) -> str:
    """A duration as H:MM:SS (an ETA, a time so far)."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def did_you_mean(word, choices) -> str:
    """" (did you mean 'lr'?)": the nearest of choices to a mistyped word (difflib's ratio, as Python's
    own NameError suggestions and Snakemake's use it), or '' where none is near."""
    import difflib

    if not isinstance(word, str):
        return ""
    near = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""
