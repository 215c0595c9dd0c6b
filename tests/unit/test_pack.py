"""airetrain pack: POSIX tar shards in WebDataset's layout, an index that checks them, a resumable and
deterministic writer; staging the shards, and reading members in place."""
import csv
import hashlib
import json
import os
import signal
import sys

import pytest

from airetrain.stage.transfer import StageError
from airetrain.stage.pack import INDEX, MEMBERS, WORK, pack
from airetrain.stage.staging import stage_dataset
from conftest import BIN, run, spawn, wait_for


def make_tree(root, count=60, sizes=(100, 3000), long_name=True):
    """Samples of two files (x.bin + x.json) in class folders, and a file with a name over tar's 100 bytes."""
    rng = __import__("random").Random(0)
    for i in range(count):
        folder = root / "train" / f"c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"s{i:04d}.bin").write_bytes(os.urandom(rng.randint(*sizes)))
        (folder / f"s{i:04d}.json").write_text(json.dumps({"i": i}))
    if long_name:
        (root / "train" / ("long" * 40 + ".bin")).write_bytes(b"x" * 10)
    return root


def shard_bytes(dest):
    return {p.name: p.read_bytes() for p in sorted(dest.glob("shard-*.tar"))}


def members(dest):
    with open(dest / MEMBERS, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_shards_are_posix_tar_with_an_index_of_every_member(tmp_path):
    src = make_tree(tmp_path / "src")
    lines = []
    index = pack(src, tmp_path / "shards", shard_bytes=40_000, jobs=2, log=lines.append)
    assert "1 member name(s) are over 100 bytes" in lines[0]
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    assert index["files"] == len(files) == 121 and index["samples"] == 61
    assert index["shard_count"] == len(index["shards"]) > 3
    assert index["bytes"] == sum((src / f).stat().st_size for f in files)
    assert index["folders"]["train"] == 121 and index["folders"]["train/c0"] == 40
    listed = []
    for shard in index["shards"]:   # GNU tar lists every shard: plain POSIX tar
        names = run(["tar", "-tf", str(tmp_path / "shards" / shard["name"])]).stdout.split()
        listed += names
        assert len(names) == shard["files"]
        assert hashlib.sha256((tmp_path / "shards" / shard["name"]).read_bytes()).hexdigest() == shard["sha256"]
    assert sorted(listed) == files
    rows = members(tmp_path / "shards")
    assert [r["path"] for r in rows] == listed
    for row in rows:   # the offset and size address the member's bytes in its shard
        with open(tmp_path / "shards" / row["shard"], "rb") as f:
            f.seek(int(row["offset"]))
            data = f.read(int(row["size"]))
        assert data == (src / row["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == row["sha256"]
    shard_of = {}
    for row in rows:   # a sample's files (same key) are in one shard, side by side
        shard_of.setdefault(row["path"].rsplit(".", 1)[0], set()).add(row["shard"])
    assert all(len(s) == 1 for s in shard_of.values())


def test_the_same_files_give_the_same_shards_whatever_the_workers_and_mtimes(tmp_path):
    src = make_tree(tmp_path / "src")
    pack(src, tmp_path / "one", shard_bytes=40_000, jobs=1, log=lambda line: None)
    for p in src.rglob("*.bin"):
        os.utime(p, (12345, 12345))
    pack(src, tmp_path / "two", shard_bytes=40_000, jobs=2, log=lambda line: None)
    assert shard_bytes(tmp_path / "one") == shard_bytes(tmp_path / "two") != {}
    assert (tmp_path / "one" / MEMBERS).read_bytes() == (tmp_path / "two" / MEMBERS).read_bytes()


def test_the_shards_read_with_the_webdataset_projects_wids_reader(tmp_path):
    import wids

    from airetrain.train.files import Samples

    src = make_tree(tmp_path / "src", long_name=False)   # wids reads names of up to 100 bytes only
    lines = []
    pack(src, tmp_path / "shards", shard_bytes=40_000, log=lines.append)
    assert not any("100 bytes" in line for line in lines)
    theirs = wids.ShardListDataset(str(tmp_path / "shards" / "wids.json"), transformations=[],
                                   localname=lambda url: url)
    ours = Samples(tmp_path / "shards")
    assert len(theirs) == len(ours) == 60
    by_key = {ours[i]["__key__"]: ours[i] for i in range(len(ours))}
    for i in range(len(theirs)):
        sample = theirs[i]
        mine = by_key[sample["__key__"]]
        assert {k.lstrip("."): v.getvalue() for k, v in sample.items() if k.startswith(".")} == \
            {k: v for k, v in mine.items() if k != "__key__"}


def test_a_killed_pack_resumes_keeping_its_finished_shards_and_ends_with_the_same_shards(tmp_path):
    src = make_tree(tmp_path / "src", count=1500, sizes=(20_000, 40_000))
    pack(src, tmp_path / "whole", shard_bytes=500_000, jobs=1, log=lambda line: None)
    dest = tmp_path / "cut"
    cmd = [sys.executable, "-m", "airetrain", "pack", str(src), str(dest), "--shard-size", "500k", "--jobs", "1"]
    proc = spawn(cmd)
    wait_for(lambda: len(list((dest / WORK).glob("*.json"))) >= 2 if (dest / WORK).exists() else False,
             what="two finished shards", every=0.005)
    os.killpg(proc.pid, signal.SIGSTOP)   # frozen: what is on disk now is what the kill leaves
    finished = {p.name: p.stat().st_mtime_ns for p in dest.glob("shard-*.tar")
                if (dest / WORK / f"{p.name}.json").exists()}
    total = len(shard_bytes(tmp_path / "whole"))
    assert 2 <= len(finished) < total and not (dest / INDEX).exists()   # the kill lands mid-pack
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = run(cmd)
    assert f"kept {len(finished)} finished shards" in resumed.stdout
    assert {name: (dest / name).stat().st_mtime_ns for name in finished} == finished   # not rewritten
    assert shard_bytes(dest) == shard_bytes(tmp_path / "whole")
    assert (dest / INDEX).read_text().replace(str(dest), "") == \
        (tmp_path / "whole" / INDEX).read_text().replace(str(tmp_path / "whole"), "")
    assert not list(dest.glob(".shard-*.tmp"))


def test_pack_refuses_bad_input_naming_it(tmp_path):
    src = make_tree(tmp_path / "src", count=3)
    proc = run([str(BIN / "airetrain"), "pack", str(src), str(tmp_path / "d"), "--shard-size", "lots"], check=False)
    assert proc.returncode == 2 and "--shard-size 'lots'" in proc.stderr and "512MB" in proc.stderr
    proc = run([str(BIN / "airetrain"), "pack", str(src), str(src / "shards")], check=False)
    assert proc.returncode == 2 and "cannot go inside" in proc.stderr
    (src / "train" / "tab\tname.bin").write_bytes(b"1")
    proc = run([str(BIN / "airetrain"), "pack", str(src), str(tmp_path / "d")], check=False)
    assert proc.returncode == 2 and "tabs and newlines" in proc.stderr


@pytest.fixture
def packed(tmp_path):
    src = make_tree(tmp_path / "src")
    pack(src, tmp_path / "shards", shard_bytes=40_000, log=lambda line: None)
    return tmp_path / "shards"


def test_staging_copies_and_verifies_the_shards_and_restaging_is_a_no_op(packed, tmp_path):
    index = json.loads((packed / INDEX).read_text())
    first = stage_dataset(packed, tmp_path / "fast")
    assert first["format"] == "shards" and first["engine"] == "shards" and first["sha256_verified"]
    assert first["files"] == index["shard_count"] + 3 == first["copied_files"]   # + index, members, wids
    assert not (tmp_path / "fast" / WORK).exists()   # pack's own records are not staged
    assert shard_bytes(tmp_path / "fast") == shard_bytes(packed)
    before = {p.name: p.stat().st_ino for p in (tmp_path / "fast").glob("shard-*")}
    again = stage_dataset(packed, tmp_path / "fast")
    assert again["mode"] == "unchanged" and again["copied_files"] == 0
    assert {p.name: p.stat().st_ino for p in (tmp_path / "fast").glob("shard-*")} == before


def test_a_truncated_shard_is_refused_by_name_before_copying(packed, tmp_path):
    shard = packed / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[:-1024])
    with pytest.raises(StageError, match=r"shard shard-000001\.tar has \d+ bytes, its index says \d+ "
                                         r"\(truncated or replaced\)"):
        stage_dataset(packed, tmp_path / "fast")
    assert not list((tmp_path / "fast").glob("*"))


def test_a_missing_shard_is_refused_by_name_before_copying(packed, tmp_path):
    (packed / "shard-000001.tar").unlink()
    with pytest.raises(StageError, match=r"shard shard-000001\.tar is in .*index\.json but missing; "
                                         r"run airetrain pack again"):
        stage_dataset(packed, tmp_path / "fast")
    assert not list((tmp_path / "fast").glob("*"))


def test_an_altered_shard_is_refused_by_name_and_not_left_staged(packed, tmp_path):
    stage_dataset(packed, tmp_path / "fast")
    shard = packed / "shard-000002.tar"
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF   # same size, one byte changed
    shard.write_bytes(bytes(data))
    with pytest.raises(StageError, match=r"shard shard-000002\.tar does not match the sha256 in its index"):
        stage_dataset(packed, tmp_path / "fast")
    assert not (tmp_path / "fast" / "shard-000002.tar").exists()


def test_members_read_in_place_in_any_order_from_loader_workers(packed, tmp_path):
    import torch
    from torch.utils.data import DataLoader

    from airetrain.train.files import DatasetFiles

    src = tmp_path / "src"
    stage_dataset(packed, tmp_path / "fast")
    files = DatasetFiles(tmp_path / "fast", under="train/c1/")
    assert files.packed and len(files) == 40
    assert [files.path(i) for i in range(len(files))] == \
        sorted(str(p.relative_to(src)) for p in (src / "train" / "c1").iterdir())
    order = torch.randperm(len(files), generator=torch.Generator().manual_seed(1)).tolist()
    loader = DataLoader(files, batch_size=None, sampler=order, num_workers=2,
                        worker_init_fn=lambda _: None)
    got = {path: data for path, data in loader}
    assert got == {files.path(i): (src / files.path(i)).read_bytes() for i in range(len(files))}
    folder = DatasetFiles(src, under="train/c1/")   # a plain folder reads the same
    assert not folder.packed and [folder[i] for i in range(40)] == [files[i] for i in range(40)]


def test_a_shard_shorter_than_its_index_fails_the_read_by_name(packed, tmp_path):
    from airetrain.train.files import DatasetFiles

    files = DatasetFiles(packed)
    last = max(range(len(files)), key=lambda i: (files.shards[i], files.offsets[i]))
    shard = packed / files.shard_names[files.shards[last]]
    os.truncate(shard, int(files.offsets[last]) + 1)
    with pytest.raises(OSError, match=f"{shard.name} is shorter than its index says"):
        files.read(last)


def test_staging_a_huge_folder_is_refused_before_copying_with_the_pack_command(tmp_path):
    src = make_tree(tmp_path / "src", count=10)
    with pytest.raises(StageError, match=r"\(21 files, 0\.0 GB\) would exceed the fast root's file quota of 20 "
                                         r"files per job \(site\.fast_root_max_files\); pack it into shards first: "
                                         rf"airetrain pack {src} {src}-shards"):
        stage_dataset(src, tmp_path / "fast", limits={"max_files": 20, "max_gb": 1000})
    assert not (tmp_path / "fast").exists()

