"""The wheel holds every package and the whole workflow: what a non-editable install gets."""
import shutil
import subprocess
import sys
import zipfile

from conftest import REPO

from airetrain.workflow import files


def test_the_wheel_has_every_subpackage_and_every_workflow_file(tmp_path):
    source = tmp_path / "source"   # a clean copy: no build/ or egg-info left over from another build
    shutil.copytree(REPO / "airetrain", source / "airetrain", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(source)], check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = tmp_path.glob("airetrain-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(REPO)) for p in (REPO / "airetrain").rglob("*.py")}
    assert sources <= names, sorted(sources - names)
    workflow = {f"airetrain/workflow/{p}" for p in files()}
    assert {"airetrain/workflow/Snakefile", "airetrain/workflow/schemas/config.schema.yaml",
            "airetrain/workflow/profiles/aire/profile.yaml", "airetrain/workflow/envs/requirements.txt"} <= workflow
    assert workflow <= names, sorted(workflow - names)
