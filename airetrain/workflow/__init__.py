"""The Snakemake workflow, shipped inside the package: its Snakefile, rules, schema, report captions,
the torchrun entry point, the conda environment and the built-in profiles.

A project uses it as a Snakemake module (`airetrain init` writes that Snakefile), so upgrading airetrain
upgrades the workflow, and the project's repository holds only the project's own files.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent
SNAKEFILE = ROOT / "Snakefile"
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
TRAIN_SCRIPT = ROOT / "scripts" / "train.py"
PROFILES = ROOT / "profiles"


def snakefile() -> str:
    """The workflow's Snakefile, for a project's `module airetrain: snakefile: ...`."""
    return str(SNAKEFILE)


def files() -> list[Path]:
    """Every file of the workflow (what a wheel must carry), relative to ROOT."""
    return sorted(p.relative_to(ROOT) for p in ROOT.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
