"""The README and the docs say what the code does: the configuration reference is generated from the
schema (every config example plans: test_doc_examples.py), every `airetrain` command line parses, every
relative link and every file the README's map names exists, and the README is a path of at most 300 lines."""
import re
import shlex

import pytest

from airetrain import config_docs
from airetrain.cli import build_parser
from airetrain.schema import load_schema
from conftest import REPO

PAGES = [REPO / "README.md", REPO / "config" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
ORDER = ["Two commands", "Your own project", "On Aire", "Bring your own train.py", "Your own model, dataset and loss",
         "Watching runs and reading the report", "Where things are", "Docs"]


def blocks(kind: str):
    for page in PAGES:
        for lang, body in FENCE.findall(page.read_text()):
            if lang == kind:
                yield page, body


def test_docs_configuration_md_is_generated_from_the_schema():
    """Regenerate with: python -m airetrain.config_docs > docs/configuration.md"""
    assert (REPO / "docs/configuration.md").read_text() == config_docs.markdown()


def test_the_reference_names_every_key_of_a_run():
    text = (REPO / "docs/configuration.md").read_text()
    for key in load_schema()["$defs"]["run"]["properties"]:
        assert f"| `{key}" in text, key


def command_lines():
    """Each `airetrain` line of a bash block, and each `$ airetrain` prompt of a plain one (the rest of a
    plain block is what a command printed)."""
    for kind, prompt in (("bash", ""), ("", "$ ")):
        for page, body in blocks(kind):
            for line in body.splitlines():
                if line.strip().startswith(prompt + "airetrain "):
                    yield page, line.strip().removeprefix(prompt)


def test_every_airetrain_command_line_parses():
    """Those that need a cluster or a finished run are checked by the command line's own parser; the
    tests of each command run them (init, plan, status, report, compare, restart, workflow-path)."""
    lines = list(command_lines())
    assert len(lines) >= 10
    for page, line in lines:
        words = shlex.split(re.sub(r"<[^>]*>", "X", line), comments=True)
        words = words[:words.index(">")] if ">" in words else words
        try:
            build_parser().parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"{page.relative_to(REPO)}: `{line}` does not parse")


def test_every_relative_link_resolves():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.relative_to(REPO)}: {target}"


def test_the_readme_is_a_path_of_at_most_300_lines():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections == ORDER, sections


def test_every_file_the_readmes_map_names_exists():
    table = (REPO / "README.md").read_text().split("## Where things are", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 20
    tests = {p.name for p in (REPO / "tests").rglob("test_*.py")}
    package = REPO / "airetrain"
    for _, edit, test in rows:
        for name in re.findall(r"`([^`]+)`", test):
            assert any(re.fullmatch(name.replace("*", ".*"), t) for t in tests), name
        for name in re.findall(r"`([^`]+)`", edit):
            found = [p for p in (package / name, REPO / name, package / "report" / name, package / "workflow" / name)
                     if p.exists() or list(p.parent.glob(p.name))]
            assert found, name
