"""records.py: one definition per file between the steps, enforced on write and read."""
import re

import pytest

from airetrain import records
from airetrain.records import RecordError, StageRecord, check, read_record, write_record
from airetrain.typed import to_dict
from conftest import REPO


def stage_record(**changes):
    base = {"source": None, "target": None, "format": None, "files": 0, "bytes": 0, "copied_files": 0,
            "copied_bytes": 0, "seconds": 0.0, "mb_per_s": None, "mode": "none", "engine": None,
            "sha256_verified": False, "fast_root": "/f", "fast_root_source": "config", "host": None, "nodes": None}
    return {**base, **changes}


def test_a_record_with_a_missing_or_unknown_key_is_refused_naming_the_keys(tmp_path):
    bad = stage_record(extra=1)
    del bad["files"]
    with pytest.raises(RecordError, match=r"not a StageRecord: missing files; unknown extra"):
        write_record(tmp_path / "stage.json", StageRecord, bad)
    assert not (tmp_path / "stage.json").exists()


def test_nested_records_are_checked_too():
    from airetrain.plan.planner import plan_all

    plan = plan_all({"runs": {"r": {}}}, env={"HOME": "/home/u", "SCRATCH": "/scratch/u"})["r"]
    data = to_dict(plan)
    check(records.Plan, data)   # what the planner writes is a Plan
    del data["slurm"]["qos"]
    with pytest.raises(RecordError, match=r"\.slurm is not a SlurmRequest: missing qos"):
        check(records.Plan, data)


def test_written_and_read_back(tmp_path):
    write_record(tmp_path / "stage.json", StageRecord, stage_record())
    assert read_record(tmp_path / "stage.json", StageRecord) == stage_record()


def test_docs_outputs_md_is_generated_from_the_definitions():
    """Regenerate with: python -m airetrain.records > docs/outputs.md"""
    assert (REPO / "docs" / "outputs.md").read_text() == records.outputs_markdown()


def test_the_readme_outputs_table_lists_every_record_file():
    readme = (REPO / "README.md").read_text()
    table = readme.split("## Outputs", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`results/<run>/([^`]+)`", table))
    assert set(records.RECORDS) <= listed, set(records.RECORDS) - listed
    assert "docs/outputs.md" in table
