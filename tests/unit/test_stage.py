"""stage: copy, skip what is unchanged, copy what changed, and fail loudly on missing data."""
import json
import os

import pytest

from airetrain.stage.prepare import write_file_list
from airetrain.stage.transfer import StageError, copy_dataset


@pytest.fixture
def dataset(tmp_path):
    src = tmp_path / "scratch" / "ds"
    for i in range(30):
        f = src / f"part{i % 3}" / f"file{i:03d}.bin"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(os.urandom(1000 + 37 * i))
    return src


def tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".airetrain")}


@pytest.mark.parametrize("engine", ["cp", "python"])
def test_copies_everything_and_records_it(dataset, tmp_path, engine):
    dst = tmp_path / "fast" / "ds"
    result = copy_dataset(dataset, dst, engine=engine)
    assert tree(dst) == tree(dataset)
    assert result["engine"] == engine
    assert copy_dataset(dataset, dst)["mode"] == "unchanged"  # mtimes were carried over exactly
    assert result["mode"] == "copied" and result["files"] == 30 == result["copied_files"]
    assert result["bytes"] == sum(len(b) for b in tree(dataset).values())
    assert result["seconds"] > 0 and result["target"] == str(dst)


def test_restage_skips_unchanged_files(dataset, tmp_path):
    dst = tmp_path / "fast" / "ds"
    copy_dataset(dataset, dst)
    before = {p: p.stat().st_ino for p in dst.rglob("*.bin")}
    again = copy_dataset(dataset, dst)
    assert again["mode"] == "unchanged" and again["copied_files"] == 0
    assert {p: p.stat().st_ino for p in dst.rglob("*.bin")} == before  # nothing rewritten


@pytest.mark.parametrize("engine", ["cp", "python"])
def test_changed_file_is_copied_again(dataset, tmp_path, engine):
    dst = tmp_path / "fast" / "ds"
    copy_dataset(dataset, dst, engine=engine)
    changed = dataset / "part1" / "file001.bin"
    changed.write_bytes(b"new content")
    os.utime(changed, ns=(1, 1))
    result = copy_dataset(dataset, dst, engine=engine)
    assert result["copied_files"] == 1 and result["mode"] == "copied"
    assert (dst / "part1" / "file001.bin").read_bytes() == b"new content"


def test_stale_and_partial_target_files_are_repaired(dataset, tmp_path):
    dst = tmp_path / "fast" / "ds"
    copy_dataset(dataset, dst)
    (dst / "part0" / "file000.bin").write_bytes(b"half")      # an interrupted copy: wrong size/mtime
    (dst / "part0" / "gone.bin").write_bytes(b"old version")   # not in the source any more
    result = copy_dataset(dataset, dst)
    assert result["copied_files"] == 1
    assert tree(dst) == tree(dataset)


def test_file_missing_from_the_dataset_fails_loudly(dataset, tmp_path):
    write_file_list(dataset)
    (dataset / "part2" / "file005.bin").unlink()
    with pytest.raises(StageError, match="missing.*part2/file005.bin"):
        copy_dataset(dataset, tmp_path / "fast" / "ds")


def test_missing_dataset_directory_fails_loudly(tmp_path):
    with pytest.raises(StageError, match="does not exist"):
        copy_dataset(tmp_path / "nope", tmp_path / "fast")


def test_sha256_verification_catches_silent_corruption(dataset, tmp_path):
    write_file_list(dataset)
    dst = tmp_path / "fast" / "ds"
    copy_dataset(dataset, dst, verify_sha256=True)
    victim = dst / "part0" / "file003.bin"
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[10] ^= 0xFF                                    # same size, same mtime: only a hash sees it
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(StageError, match="sha256 mismatch.*file003"):
        copy_dataset(dataset, dst, verify_sha256=True)
    manifest = json.loads((dataset / "files.json").read_text())
    assert "part0/file003.bin" in manifest["files"]
