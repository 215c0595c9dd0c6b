"""`airetrain`: plan, submit and watch a training pipeline; set up a project; read what the runs did."""
from __future__ import annotations

import argparse
import logging
import sys

# only what every command needs: each imports its own, so `airetrain report --jobs` starts in a few hundredths
# of a second
from .errors import ConfigError, NoSpaceError
from .commands import (doctor, efficiency_report, node_check, pack_run, pipeline_steps, planning, runs, setup, site,
                       step_profile, submit, tune_steps)


class _Unbuilt:
    """The parser of a command that does not run this time: each call on it does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self


class _OneCommand:
    """The subcommands, built only for the command that runs: argparse builds each parser in full, and two dozen
    of them cost more than folding a thousand jobs' accounting."""

    def __init__(self, sub, command: str | None):
        self.sub, self.command, self.found = sub, command, False

    def add_parser(self, name: str, **kwargs):
        if self.command is not None and name != self.command:
            return _Unbuilt()
        self.found = True
        if name in WORKFLOW_STEPS:   # callable, but not on the first screen: its help is its own --help
            kwargs["description"] = kwargs.pop("help", None)
        return self.sub.add_parser(name, **kwargs)


# The commands the workflow's rules and jobs run; `airetrain --help` names them in one line.
WORKFLOW_STEPS = ("resolve", "stage", "launch", "promote", "health", "health-node", "requeue-excluding", "tune-step",
                  "tune-table", "workflow-job", "run-pack")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's, or only command's where it is one (else every one)."""
    parser = argparse.ArgumentParser(prog="airetrain", description=__doc__,
                                     epilog="The workflow's own steps, which its rules and jobs run: "
                                            f"{', '.join(WORKFLOW_STEPS)} (each has its --help).")
    sub = _OneCommand(parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands"),
                      command)
    # the user's commands first, in the order `airetrain --help` lists them; then the workflow's steps
    for commands in (planning, submit, setup, doctor, runs, efficiency_report, step_profile, site, pipeline_steps,
                     pack_run, tune_steps, node_check):
        commands.add_parsers(sub)
    return parser if sub.found or command is None else build_parser()


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)   # none: --help, or a mistake
    passed = []
    if command == "submit" and "--" in argv:   # what follows is Snakemake's own
        argv, passed = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = build_parser(command).parse_args(argv)
    if passed:
        args.snakemake_args = passed
    try:
        args.func(args)
    except ConfigError as e:
        print(f"airetrain: {e}", file=sys.stderr)
        sys.exit(2)
    except NoSpaceError as e:   # a full disk or quota: the message says which, and how much is needed
        print(f"airetrain: {e}", file=sys.stderr)
        sys.exit(1)
