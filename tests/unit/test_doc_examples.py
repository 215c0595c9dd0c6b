"""Every config example of README.md and docs/ plans as written, in a project from `airetrain init`: each fenced
YAML block, and each run key the README shows inline (`seeds: [0, 1, 2]`, `tune: {...}`). `airetrain plan
--configfile example.yaml` merges it over the project's config/config.yaml, as Snakemake would. The files an
example names (a model module, a script) are tests/fixtures/examples/. An example meant to be refused says so
in the Markdown, on the line before its block: `<!-- example refused: part of the message -->`; its message is
checked instead."""
import re
import shutil
import sys

import pytest
import yaml

from airetrain import cli
from airetrain.project import init
from airetrain.schema import load_schema
from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?:<!-- example refused: (?P<refused>.*?) -->\n)?```ya?ml[^\n]*\n(?P<body>.*?)^```", re.M | re.S)
RUN_KEYS = {*load_schema()["$defs"]["run"]["properties"], "seeds", "sweep"}
TOP_KEYS = set(load_schema()["properties"])
INLINE = re.compile(r"`((?:" + "|".join(sorted(RUN_KEYS)) + r"): [\[{][^`]*)`")


def examples():
    """(id, config, the refusal's text or None) of every example."""
    found = []
    for page in PAGES:
        text = page.read_text()
        name = page.relative_to(REPO)
        for m in FENCE.finditer(text):
            block = yaml.safe_load(m["body"])
            if not isinstance(block, dict):
                continue
            line = text[:m.start("body")].count("\n")
            config = block if set(block) & TOP_KEYS else {"runs": {"example": block}}
            found.append(pytest.param(config, m["refused"], id=f"{name}:{line}"))
        if page.name == "README.md":
            for m in INLINE.finditer(text):
                line = text[:m.start()].count("\n") + 1
                config = {"runs": {"example": yaml.safe_load(m[1])}}
                found.append(pytest.param(config, None, id=f"{name}:{line}:inline"))
    return found


def test_the_examples_are_found():
    ids = [p.id for p in examples()]
    assert len(ids) >= 20 and sum(i.endswith(":inline") for i in ids) >= 4, ids


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project from `airetrain init`, with the files the examples name beside its config."""
    init(tmp_path)
    shutil.copytree(REPO / "tests/fixtures/examples", tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    yield tmp_path
    for name in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:   # other tests' own mylab
        del sys.modules[name]


@pytest.mark.parametrize("config,refused", examples())
def test_every_example_plans_as_written(project, config, refused, capsys):
    (project / "example.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        cli.main(["plan", "--configfile", "example.yaml"])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    if refused:
        assert code == 2 and refused in err, err
    else:
        assert code == 0, err
        assert "first" in out and all(run.split("-")[0] in out for run in config.get("runs", {})), out
