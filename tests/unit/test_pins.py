"""One set of pins serves the Makefile, CI and envs/aire.yaml, and it is what this suite runs on: what Aire
users install is what the tests ran."""
import re
import sys
import tomllib
from importlib import metadata

import yaml

from airetrain.commands import doctor

from conftest import REPO

PINS = REPO / "envs" / "requirements.txt"
TOOLING = {"pip", "setuptools", "wheel", "airetrain"}   # the installer itself, and this package


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    out = {}
    for line in PINS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[canonical(name)] = version
    return out


def test_the_pins_file_pins_every_line_exactly():
    lines = [line for line in PINS.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9_.]*", line) for line in lines), lines
    assert "+" not in pins()["torch"]   # one version for every build: CPU here, CUDA on Aire


def test_the_makefile_installs_the_pins_and_pins_nothing_itself():
    makefile = (REPO / "Makefile").read_text()
    assert "PINS   := envs/requirements.txt" in makefile and "-r $(PINS)" in makefile
    assert "pip install -q --no-deps -e ." in makefile   # the package adds no versions of its own
    assert not re.search(r"[A-Za-z]==\d", makefile), "a version pinned in the Makefile, beside the pins file"


def test_ci_installs_through_the_makefile():
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"(?m)^make test$", ci) and "pip install" not in ci


def test_the_aire_environment_installs_the_same_pins_with_the_same_python():
    env = yaml.safe_load((REPO / "envs" / "aire.yaml").read_text())
    python = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python=")]
    assert python == [f"python={sys.version_info[0]}.{sys.version_info[1]}"]   # the interpreter the tests run
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-r requirements.txt" in pip   # conda resolves it beside envs/aire.yaml
    assert [p for p in pip if not p.startswith(("-r ", "--extra-index-url "))] == [], "a package beside the pins"
    index = next(p for p in pip if p.startswith("--extra-index-url"))
    assert re.search(r"/whl/cu12\d$", index), "the CUDA build for Aire must be a CUDA 12 one"


def test_this_environment_is_exactly_the_pinned_one():
    pinned = pins()
    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    for name, version in pinned.items():
        assert name in installed, f"{name} is pinned but not installed"
        assert installed[name].split("+", 1)[0] == version, (name, installed[name], version)
    unpinned = sorted(set(installed) - set(pinned) - TOOLING)
    assert unpinned == [], f"installed here but not pinned (Aire users would get another version): {unpinned}"


def test_pyproject_lower_bounds_are_the_tested_versions():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values()
                                              for r in extra]
    pinned = pins()
    for requirement in requirements:
        name, bound = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9][A-Za-z0-9_.]*)", requirement).groups()
        assert pinned[canonical(name)] == bound, requirement


def test_doctor_says_whether_torch_is_the_pinned_one(tmp_path):
    assert doctor.pinned_version("torch") == pins()["torch"]
    assert "is the pinned version" in doctor.torch_pin_line("2.13.0+cu128", "2.13.0")
    assert doctor.torch_pin_line("2.6.0+cu124", "2.13.0").startswith("WARNING: torch 2.6.0+cu124 is not the pinned")
    assert "not found" in doctor.torch_pin_line("2.13.0", doctor.pinned_version("torch", tmp_path / "none.txt"))


def test_doctor_states_what_the_cuda_build_needs_of_the_driver():
    assert "CPU build" in doctor.cuda_lines(None, None, None)[0]
    assert any("none found" in line for line in doctor.cuda_lines("12.8", None, None))
    ok = doctor.cuda_lines("12.8", "570.86.15", "12.8")
    assert ok == ["CUDA: this torch is built for CUDA 12.8", "NVIDIA driver: 570.86.15, supports CUDA up to 12.8"]
    old = doctor.cuda_lines("12.8", "550.54.15", "12.4")
    assert old[-1].startswith("WARNING: the driver supports CUDA 12.4, older than this build's 12.8")
