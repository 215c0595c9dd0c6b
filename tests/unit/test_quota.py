"""The fast root's quotas: refused or warned about in the plan, before anything is submitted, from the
dataset's own index or files.json; and the file counts `airetrain doctor` shows."""
import json
import os

import pytest

from airetrain.commands.resolve import resolve_plan
from airetrain.errors import ConfigError
from airetrain.plan.planner import plan_all
from airetrain.quota import count_files
from airetrain.records import to_dict
from airetrain.stage.prepare import write_file_list
from airetrain.stage.pack import pack
from conftest import BIN, ENV, run


def folder(root, files):
    for i in range(files):
        (root / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"c{i % 2}" / f"{i}.bin").write_bytes(b"x" * 100)
    write_file_list(root)   # files.json: what the plan reads, instead of walking the tree
    return root


def planned(path, **site):
    return plan_all({"site": site, "runs": {"r": {"data": {"name": "image_folder", "path": str(path)}}}},
                    env=ENV)["r"]


def test_a_dataset_over_the_file_quota_is_refused_with_the_numbers_and_the_pack_command(tmp_path):
    src = folder(tmp_path / "imgs", 30)
    with pytest.raises(ConfigError) as e:
        planned(src, fast_root_max_files=25)
    message = str(e.value)
    assert "runs.r.data.path: the dataset" in message and "(31 files, 0.0 GB)" in message
    assert "file quota of 25 files per job (site.fast_root_max_files)" in message
    assert f"airetrain pack {src} {src}-shards (then data.path: {src}-shards)" in message


def test_a_dataset_over_a_tenth_of_the_file_quota_is_warned_about(tmp_path, caplog):
    src = folder(tmp_path / "imgs", 30)
    plan = planned(src, fast_root_max_files=200)
    assert plan.dataset_size == {"files": 31, "bytes": 3000, "format": "folder", "from": str(src / "files.json")}
    [warning] = plan.warnings
    assert "16% of the fast root's file quota (200)" in warning and "staging it file by file is slow" in warning
    assert "airetrain pack" in warning
    assert planned(src, fast_root_max_files=1000).warnings == []


def test_a_dataset_over_the_byte_quota_is_refused(tmp_path):
    src = folder(tmp_path / "imgs", 4)
    with pytest.raises(ConfigError, match=r"quota of 1e-07 GB per job \(site\.fast_root_max_gb\)"):
        planned(src, fast_root_max_gb=0.0000001)


def test_packed_the_same_dataset_fits_and_the_plan_counts_its_shards(tmp_path):
    src = folder(tmp_path / "imgs", 30)
    index = pack(src, tmp_path / "imgs-shards", shard_bytes=10_000, log=lambda line: None)
    plan = planned(tmp_path / "imgs-shards", fast_root_max_files=25)
    assert plan.dataset_size["format"] == "shards" and plan.dataset_size["files"] == index["shard_count"] + 3
    assert plan.warnings == []


def test_format_shards_without_an_index_is_refused(tmp_path):
    src = folder(tmp_path / "imgs", 3)
    with pytest.raises(ConfigError, match=r"data\.format is shards, but .* has no shard index \(index\.json\): "
                                          r"pack it first: airetrain pack"):
        plan_all({"runs": {"r": {"data": {"name": "image_folder", "path": str(src), "format": "shards"}}}},
                 env=ENV)


def test_a_folder_without_a_manifest_is_not_walked_at_a_parse_but_refused_by_the_plan_step(tmp_path):
    src = folder(tmp_path / "imgs", 30)
    (src / "files.json").unlink()
    plan = planned(src, fast_root_max_files=25)   # a parse of the Snakefile does not walk the tree
    assert plan.dataset_size is None and plan.fast_root_quota == {"max_files": 25, "max_gb": 1000}
    with pytest.raises(ConfigError) as e:
        resolve_plan(plan)   # the plan step does, once
    assert str(e.value) == (f"runs.r.data.path: the dataset {src} (more than 25 files: the count stopped there) "
                            "would exceed the fast root's file quota of 25 files per job "
                            f"(site.fast_root_max_files); pack it into shards first: airetrain pack {src} "
                            f"{src}-shards (then data.path: {src}-shards); nothing of this run was submitted")


def test_the_walk_stops_as_soon_as_it_passes_the_quota(tmp_path):
    src = folder(tmp_path / "imgs", 6000)
    (src / "files.json").unlink()
    assert count_files(src, 1000) == (1001, 100_100, False)   # 1,001 entries read, not 6,000
    assert count_files(src, 6000) == (6000, 600_000, True)


def test_the_plan_step_keeps_the_count_of_a_folder_under_the_quota_and_the_stage_step_checks_again(tmp_path):
    src = folder(tmp_path / "imgs", 30)
    (src / "files.json").unlink()
    plan = resolve_plan(planned(src, fast_root_max_files=200))
    assert plan.dataset_size == {"files": 30, "bytes": 3000, "format": "folder", "from": "walk"}
    [warning] = plan.warnings   # 15% of the quota: slow to stage file by file
    assert warning.startswith(f"run r: the dataset {src} (30 files, 0.0 GB) is 15% of the fast root's file quota")
    from airetrain.stage import staging
    folder(src, 250)   # the folder grows while the run waits in the queue
    (src / "files.json").unlink()
    (tmp_path / "plan.json").write_text(json.dumps(to_dict(plan)))
    with pytest.raises(staging.StageError, match=r"\(250 files, 0\.0 GB\) would exceed the fast root's file quota"):
        staging.stage_run(str(tmp_path / "plan.json"), tmp_path / "stage.json")


def test_airetrain_resolve_fails_the_plan_job_of_a_folder_over_the_quota(tmp_path):
    src = folder(tmp_path / "imgs", 30)
    (src / "files.json").unlink()
    plan = planned(src, fast_root_max_files=25)
    out = tmp_path / "plan.json"
    result = run([str(BIN / "airetrain"), "resolve", "--plan-json", json.dumps(to_dict(plan)), "--out", str(out)],
                 env=ENV, check=False)
    assert result.returncode != 0 and not out.exists()
    assert "more than 25 files: the count stopped there" in result.stderr and "airetrain pack" in result.stderr


def fake_tool(bin_dir, name, output):
    """A FAKE of Aire's quota tools (this machine has no Lustre, and no quotas): prints what `lfs quota`
    or `quota -s` prints there."""
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}EOF\n")
    tool.chmod(0o755)
    return bin_dir


LFS_OUTPUT = """Disk quotas for usr alice (uid 1234):
     Filesystem    used   quota   limit   grace   files   quota   limit   grace
/mnt/scratch/users/alice
                  812G      0k      1T       -  1390000       0 1500000       -
"""


def test_doctor_shows_the_file_counts_from_lfs_quota(tmp_path):
    fake = fake_tool(tmp_path / "bin", "lfs", LFS_OUTPUT)
    env = {"PATH": f"{fake}:{BIN}:/usr/bin:/bin", "SCRATCH": "/mnt/scratch/users/alice"}
    out = run([str(BIN / "airetrain"), "doctor"], env=env).stdout
    assert "quota $SCRATCH (/mnt/scratch/users/alice): 1,390,000 files of 1,500,000 (93%); OVER 90%: Aire counts " \
           "this as full" in out


QUOTA_OUTPUT = """Disk quotas for user alice (uid 1234):
     Filesystem   space   quota   limit   grace   files   quota   limit   grace
/dev/mapper/home-vol
                  9000M  10240M  10240M          41000   90000  100000
"""


def test_doctor_shows_the_file_counts_from_quota_where_there_is_no_lfs(tmp_path):
    fake = fake_tool(tmp_path / "bin", "quota", QUOTA_OUTPUT)
    env = {"PATH": f"{fake}:{BIN}:/usr/bin:/bin"}
    out = run([str(BIN / "airetrain"), "doctor"], env=env).stdout
    assert "quota /dev/mapper/home-vol: 41,000 files of 100,000 (41%)" in out and "OVER" not in out


def test_doctor_says_when_no_quota_tool_is_installed(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = run([str(BIN / "airetrain"), "doctor"], env={"PATH": str(empty), "HOME": str(tmp_path)},
              exact_env=True).stdout
    assert "file quotas: unknown here (neither lfs nor quota is installed); on Aire, `quota -s` or " \
           "`lfs quota -u $USER $SCRATCH` shows them" in out


# ---- the durable root's room for checkpoint.keep + 1 checkpoints, checked by the plan step

def gpu_plan(tmp_path, **checkpoint):
    """A GPU run (strategy auto: the memory estimate counts its parameters, on the meta device) with
    its durable root at tmp_path/scratch."""
    from conftest import make_plan

    return make_plan({"gpus": 1, "checkpoint": checkpoint}, tmp_path)


def test_a_durable_root_that_cannot_hold_keep_plus_one_checkpoints_is_refused(tmp_path, small_filesystem):
    each = resolve_plan(gpu_plan(tmp_path / "large")).memory_estimate["checkpoint_bytes"]
    assert 2 * each < 6 << 20 < 4 * each   # keep 3 and one more do not fit in 6 MiB; keep 1 and one more do
    scratch = small_filesystem(tmp_path / "scratch", "6m")
    with pytest.raises(ConfigError) as e:
        resolve_plan(gpu_plan(tmp_path, keep=3))
    message = str(e.value)
    assert message.startswith(f"runs.t.checkpoint.keep: 3: the durable root {scratch} cannot hold 4 checkpoints "
                              "(keep, and the one being written) of about ")
    assert "(from the memory estimate's parameters and optimizer state)" in message
    assert "and it has 6.3 MB free; free space there, or lower checkpoint.keep; nothing of this run was submitted" \
        in message
    resolve_plan(gpu_plan(tmp_path, keep=1))


def test_a_run_planned_again_is_sized_from_its_newest_checkpoint(tmp_path, small_filesystem):
    from conftest import make_plan

    small_filesystem(tmp_path / "scratch", "4m")
    plan = make_plan({}, tmp_path)   # a CPU run: no memory estimate, so only an earlier checkpoint tells
    resolve_plan(plan)   # nothing is known yet: nothing is refused
    plan.checkpoints_dir.mkdir(parents=True)
    (plan.checkpoints_dir / "manifest.json").write_text(json.dumps(
        {"checkpoints": [{"file": "step-00000100.pt", "step": 100, "size": 2_000_000}]}))
    with pytest.raises(ConfigError, match=r"cannot hold 3 checkpoints .* of about 2\.0 MB \(from its newest "
                                          r"checkpoint on scratch \(step-00000100\.pt\)\): they need 6\.0 MB"):
        resolve_plan(plan)


LFS_KB = """Disk quotas for usr alice (uid 1234):
     Filesystem  kbytes   quota   limit   grace   files   quota   limit   grace
{path}
                 999000       0 1000000       -    1200       0 1500000       -
"""


def test_the_lustre_quota_counts_where_lfs_tells_it(tmp_path, monkeypatch):
    """FAKE `lfs` (this machine has no Lustre): 1,000 kB left of the user's quota, though the disk is large."""
    fake = fake_tool(tmp_path / "bin", "lfs", LFS_KB.format(path=tmp_path / "scratch"))
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    with pytest.raises(ConfigError, match=r"and it has [\d.]+ [GT]B free, 1\.0 MB left of your quota \(lfs quota\)"):
        resolve_plan(gpu_plan(tmp_path, keep=3))
