"""The airetrain command: the parser of the command that runs is the only one built, --help and a mistake still
list every command, and `airetrain report --jobs` starts its sacct call before it imports the code that folds
the answer (sacct's wait on slurmdbd is most of the command's time)."""
import subprocess
import sys

import pytest

from airetrain.cli import build_parser


def commands(parser) -> set[str]:
    return set(next(a for a in parser._actions if a.dest == "command").choices)


def test_only_the_command_that_runs_is_built_and_a_mistake_or_help_sees_them_all():
    every = commands(build_parser())
    assert {"plan", "report", "status", "site", "health-node", "tune-step"} <= every
    assert commands(build_parser("report")) == {"report"}
    assert commands(build_parser("reprot")) == every   # a mistake: argparse names the choices
    args = build_parser("report").parse_args(["report", "--jobs", "12,13_4"])
    assert args.jobs == "12,13_4" and args.func.__name__ == "_report"


def test_a_mistyped_command_is_answered_with_every_command(capsys):
    from airetrain.cli import main

    with pytest.raises(SystemExit):
        main(["reprot", "--jobs", "12"])
    said = capsys.readouterr().err
    assert "invalid choice: 'reprot'" in said and "'report'" in said and "'plan'" in said


SPY = """
import subprocess, sys
seen = []
real = subprocess.Popen.__init__
def spied(self, args, *rest, **kw):   # what was imported when sacct was started
    seen.append((args[0], "airetrain.report.collection" in sys.modules))
    real(self, args, *rest, **kw)
subprocess.Popen.__init__ = spied
from airetrain.cli import main
main(["report", "--jobs", "12"])
print(seen)
"""


def test_report_jobs_starts_sacct_before_it_imports_the_fold(tmp_path):
    sacct = tmp_path / "sacct"
    sacct.write_text("#!/bin/sh\nexit 0\n")   # a stand-in: no accounting here, an empty answer
    sacct.chmod(0o755)
    out = subprocess.run([sys.executable, "-c", SPY], capture_output=True, text=True, check=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin"}).stdout
    assert out.splitlines()[-1] == "[('sacct', False)]"
    assert "| 12 |" in out and "MISSING" in out   # and the answer was folded: an id sacct does not know
