"""The wheel holds every package and the whole workflow: what a non-editable install gets."""
import zipfile

from airetrain.workflow import files
from conftest import REPO


def test_the_wheel_has_every_subpackage_and_every_workflow_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(REPO)) for p in (REPO / "airetrain").rglob("*.py")}
    assert sources <= names, sorted(sources - names)
    workflow = {f"airetrain/workflow/{p}" for p in files()}
    assert {"airetrain/workflow/Snakefile", "airetrain/workflow/schemas/config.schema.yaml",
            "airetrain/workflow/profiles/aire/profile.yaml", "airetrain/workflow/envs/requirements.txt"} <= workflow
    assert workflow <= names, sorted(workflow - names)
