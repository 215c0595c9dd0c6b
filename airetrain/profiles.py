"""The built-in Snakemake profiles (aire: the SLURM executor; local: a laptop) and the account a profile
gives every job.

A rule's own `slurm_account` resource hides the profile's default-resources, so the workflow reads the
profile's value itself (rules/common.smk) and gives it to the runs that name no account. A project
written by `airetrain init` without `--account` carries PLACEHOLDER there, which the workflow's parse and
`airetrain plan --profile` refuse before anything is submitted.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from .errors import ConfigError
from .workflow import PROFILES

PLACEHOLDER = "YOUR-SLURM-ACCOUNT"
ACCOUNT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")   # what sbatch --account takes; it reaches a command line
# Snakemake 9.19 and later read profile.yaml; earlier 9.x read config.yaml: every profile carries both.
NAMES = ("profile.yaml", "config.yaml")


def account_problem(value: str | None, where: str) -> str | None:
    """Why the profile's account cannot be sent to sbatch, or None."""
    if value is None:
        return None
    if value == PLACEHOLDER:
        return (f"{where}: slurm_account is still the placeholder {PLACEHOLDER}: write your SLURM account there "
                "(`sacctmgr -n show assoc user=$USER format=account` lists yours), or delete the line to use "
                "$SBATCH_ACCOUNT or your default account")
    if not ACCOUNT_NAME.match(value):
        return f"{where}: slurm_account {value!r} is not a SLURM account name (letters, digits, '_', '.' and '-')"
    return None


def unquoted(raw: str | None) -> str | None:
    """A resource value as a profile writes it ("'abc'" or "abc"), without the quotes."""
    return raw.strip().strip("'\"") if isinstance(raw, str) else raw


def profile_file(directory: str | Path) -> Path:
    """The profile's file that Snakemake reads (profile.yaml first, as Snakemake 9.19 and later do)."""
    for name in NAMES:
        if (Path(directory) / name).is_file():
            return Path(directory) / name
    raise ConfigError(f"--profile {directory}: no {' or '.join(NAMES)} there")


def account_of(directory: str | Path) -> str | None:
    """The profile's default-resources slurm_account, refused if it is the placeholder or no account name."""
    path = profile_file(directory)
    resources = (yaml.safe_load(path.read_text()) or {}).get("default-resources") or {}
    value = unquoted(None if resources.get("slurm_account") is None else str(resources["slurm_account"]))
    if problem := account_problem(value, str(path)):
        raise ConfigError(problem)
    return value


def built_in(name: str) -> str:
    """The text of a built-in profile (aire or local)."""
    return (PROFILES / name / "profile.yaml").read_text()


def with_account(text: str, account: str | None) -> str:
    """A profile's text with its default-resources' slurm_account set to account (else the placeholder)."""
    value = account or PLACEHOLDER
    if problem := account_problem(value if account else None, "--account"):
        raise ConfigError(problem)
    line = f"  slurm_account: {value}" + ("" if account else "   # your SLURM account: sbatch --account")
    lines = text.splitlines()
    at = lines.index("default-resources:") + 1
    return "\n".join(lines[:at] + [line] + lines[at:]) + "\n"
