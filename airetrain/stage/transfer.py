"""Copy a dataset directory from the scratch root to fast storage, verified and incremental.

A file counts as staged when the target has the source's size and mtime: the mtime is
set only after the copy completes, so an interrupted copy is simply copied again.
"""
from __future__ import annotations

import collections
import functools
import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..fsutil import read_json, sha256_file, write_json_atomic
from ..dataset_trees import DATASET_FILES, STAGE_RECORD, listing_digest, scan
from ..shards import WORK


class StageError(RuntimeError):
    pass


def _check_against_manifest(src: Path, files: dict) -> dict | None:
    """The dataset's own manifest, if it has one; every file it lists must be in src."""
    path = src / DATASET_FILES
    if not path.exists():
        return None
    manifest = read_json(path)["files"]
    missing = sorted(rel for rel in manifest if rel not in files)
    if missing:
        raise StageError(f"dataset {src} is incomplete: {len(missing)} file(s) in its manifest are missing, "
                         f"first: {missing[0]}")
    wrong = sorted(rel for rel, m in manifest.items() if files[rel][0] != m["size"])
    if wrong:
        raise StageError(f"dataset {src}: {wrong[0]} has {files[wrong[0]][0]} bytes, "
                         f"its manifest says {manifest[wrong[0]]['size']}")
    return manifest


def _copy_file(src: str, dst: str) -> None:
    """In-kernel copy (copy_file_range); plain copyfile where the filesystems refuse it."""
    fin = os.open(src, os.O_RDONLY)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            remaining = os.fstat(fin).st_size
            while remaining > 0:
                n = os.copy_file_range(fin, fout, remaining)
                if n == 0:
                    break
                remaining -= n
            return
        except OSError:
            pass  # EXDEV, EOPNOTSUPP, EINVAL on some filesystems (older Lustre, NFS)
        finally:
            os.close(fout)
    finally:
        os.close(fin)
    shutil.copyfile(src, dst)


def _copy_batch(src: Path, dst: Path, batch: list[tuple[str, int]]) -> None:
    for rel, mtime_ns in batch:
        target = str(dst / rel)
        _copy_file(str(src / rel), target)
        os.utime(target, ns=(mtime_ns, mtime_ns))  # last: marks the copy complete


def default_threads() -> int:
    return max(2, min(16, len(os.sched_getaffinity(0))))


@functools.cache
def gnu_cp() -> str | None:
    """GNU cp copies many files per process at C speed; --parents and -t are GNU-only."""
    cp = shutil.which("cp")
    if cp is None:
        return None
    try:
        version = subprocess.run([cp, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return cp if "GNU coreutils" in version else None


def _arg_batches(paths: list[str], count: int, max_bytes: int = 256 << 10) -> list[list[str]]:
    """Split paths into about `count` batches, none with an argument list over max_bytes."""
    target = max(1, len(paths) // count)
    batches, batch, size = [], [], 0
    for rel in paths:
        if batch and (len(batch) >= target or size + len(rel) + 1 > max_bytes):
            batches.append(batch)
            batch, size = [], 0
        batch.append(rel)
        size += len(rel) + 1
    return batches + ([batch] if batch else [])


def _copy_with_cp(cp: str, src: Path, dst: Path, todo: list[str], procs: int) -> None:
    """Parallel `cp --parents --preserve=timestamps`: cp sets the mtime after the data, as we do."""
    def run(batch: list[str]) -> None:
        proc = subprocess.run([cp, "--parents", "--preserve=timestamps", "-t", str(dst), "--", *batch],
                              cwd=src, capture_output=True, text=True)
        if proc.returncode:
            raise StageError(f"cp into {dst} failed: {proc.stderr.strip()[:500]}")

    with ThreadPoolExecutor(max_workers=procs) as pool:
        list(pool.map(run, _arg_batches(todo, procs * 2)))


def copy_dataset(src: str | Path, dst: str | Path, verify_sha256: bool = False, threads: int | None = None,
                 engine: str = "auto", shards: dict | None = None, quota=None) -> dict:
    """Mirror src into dst; return what was done (files, bytes, seconds, MB/s, mode, target).

    engine: "cp" (parallel GNU cp processes), "python" (threads), or "auto" (cp where it is GNU).
    shards: the index of a packed dataset (airetrain.stage.pack): its shards are copied in parallel,
    each copy hashed and checked against the index, and the pack's work records stay behind.
    quota: a callable(files, bytes) that raises before anything is copied where the copy would not fit.
    """
    src, dst = Path(src), Path(dst)
    t0 = time.perf_counter()
    if not src.is_dir():
        raise StageError(f"dataset directory {src} does not exist (is the path relative to the scratch root?)")
    files = scan(src, frozenset({STAGE_RECORD, WORK}) if shards else frozenset({STAGE_RECORD}))
    if not files:
        raise StageError(f"dataset directory {src} holds no files")
    if quota is not None:
        quota(len(files), sum(size for size, _ in files.values()))
    manifest = _check_shards(src, files, shards) if shards else _check_against_manifest(src, files)

    dst.mkdir(parents=True, exist_ok=True)
    digest = listing_digest(files)
    unchanged = _unchanged_since_last_stage(dst, digest, files)
    present = files if unchanged else scan(dst)
    todo = sorted(rel for rel, meta in files.items() if present.get(rel) != meta)
    for rel in present.keys() - files.keys():  # stale files from an older version of the dataset
        (dst / rel).unlink()
    for parent in sorted({str(Path(rel).parent) for rel in todo}):
        (dst / parent).mkdir(parents=True, exist_ok=True)
    threads = threads or default_threads()
    used = _copy(src, dst, todo, files, manifest, shards, threads, engine) if todo else None
    bad = [rel for rel in todo if _stat_path(dst / rel) != files[rel]]
    if bad:
        raise StageError(f"staging to {dst} failed verification: {len(bad)} file(s) differ, first: {bad[0]}")
    if verify_sha256 and not shards:
        _verify_hashes(src, dst, files, manifest, threads)
    if not unchanged:
        write_json_atomic(dst / STAGE_RECORD, {"source": str(src), "files": len(files), "listing": digest})

    seconds = time.perf_counter() - t0
    copied_bytes = sum(files[rel][0] for rel in todo)
    return {
        "source": str(src),
        "target": str(dst),
        "format": "shards" if shards else "folder",
        "files": len(files),
        "bytes": sum(size for size, _ in files.values()),
        "copied_files": len(todo),
        "copied_bytes": copied_bytes,
        "seconds": round(seconds, 4),
        "mb_per_s": round(copied_bytes / 1e6 / seconds, 2) if seconds > 0 else None,
        "mode": "copied" if todo else "unchanged",
        "engine": used,
        "sha256_verified": bool(shards) or verify_sha256,
    }


def _copy(src: Path, dst: Path, todo: list[str], files: dict, manifest: dict | None, shards: dict | None,
          threads: int, engine: str) -> str:
    """Copy the files of todo with the engine asked for (auto: GNU cp for folders); the engine used."""
    cp = gnu_cp() if engine in ("auto", "cp") and not shards else None
    if engine == "cp" and cp is None:
        raise StageError("engine 'cp' is for folders (shards are copied by threads), and it needs GNU cp"
                         if shards else "engine 'cp' needs GNU cp (coreutils)")
    if shards:
        _copy_shards(src, dst, todo, files, manifest, threads)
        return "shards"
    if cp:
        _copy_with_cp(cp, src, dst, todo, threads)
        return "cp"
    # Contiguous batches of sorted paths: threads mostly work in different directories.
    size = max(1, len(todo) // (threads * 4))
    batches = [[(rel, files[rel][1]) for rel in todo[i:i + size]] for i in range(0, len(todo), size)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda batch: _copy_batch(src, dst, batch), batches))
    return "python"


def _check_shards(src: Path, files: dict, index: dict) -> dict:
    """{shard name: sha256}; a listed shard that is missing or not the size the index gives is refused by
    name before anything is copied (a truncated copy on scratch, an interrupted transfer)."""
    for shard in index["shards"]:
        name = shard["name"]
        if name not in files:
            raise StageError(f"dataset {src}: shard {name} is in {src}/index.json but missing; "
                             "run airetrain pack again")
        if files[name][0] != shard["bytes"]:
            raise StageError(f"dataset {src}: shard {name} has {files[name][0]} bytes, its index says "
                             f"{shard['bytes']} (truncated or replaced); run airetrain pack again")
    return {shard["name"]: shard["sha256"] for shard in index["shards"]}


def _copy_shards(src: Path, dst: Path, todo: list[str], files: dict, sha256s: dict, threads: int) -> None:
    """Shards (and the index files beside them), in parallel; a shard whose bytes are not the index's
    is deleted from the target and named. The copy is in-kernel and the hash is of the copy, read back
    from the page cache: measured faster than hashing in the copy loop, and it checks the bytes the
    trainer will read."""
    def copy(rel: str) -> str | None:
        target = str(dst / rel)
        _copy_file(str(src / rel), target)
        if rel in sha256s and sha256_file(target) != sha256s[rel]:
            os.unlink(target)
            return rel
        mtime = files[rel][1]
        os.utime(target, ns=(mtime, mtime))   # last: marks the copy complete and verified
        return None

    # Largest first, so that one big shard does not finish alone at the end.
    order = sorted(todo, key=lambda rel: -files[rel][0])
    with ThreadPoolExecutor(max_workers=min(threads, len(order))) as pool:
        bad = sorted(filter(None, pool.map(copy, order)))
    if bad:
        raise StageError(f"dataset {src}: shard {bad[0]} does not match the sha256 in its index "
                         f"({len(bad)} shard(s) altered or corrupt); run airetrain pack again")


def _stat_path(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def _unchanged_since_last_stage(dst: Path, digest: str, files: dict) -> bool:
    """The source matches what the last stage copied and verified, and no target file is gone.

    Entry counts per directory only (no stat of the target): the target is this run's private
    directory, and each file in it was checked for size and mtime when it was copied.
    """
    record = dst / STAGE_RECORD
    if not record.exists():
        return False
    try:
        if json.loads(record.read_text()).get("listing") != digest:
            return False
    except ValueError:
        return False
    expected = collections.Counter(rel.rpartition("/")[0] for rel in files)  # files per directory
    directories = set()
    for parent in list(expected):
        while parent and parent not in directories:  # each directory counts in its own parent
            directories.add(parent)
            parent = parent.rpartition("/")[0]
    for directory in directories:
        expected[directory.rpartition("/")[0]] += 1
    expected[""] += 1  # the stage record
    try:
        return all(len(os.listdir(dst / d)) == n for d, n in expected.items())
    except FileNotFoundError:
        return False


def _verify_hashes(src: Path, dst: Path, files: dict, manifest: dict | None, threads: int | None) -> None:
    def check(rel: str) -> str | None:
        want = manifest[rel]["sha256"] if manifest and rel in manifest else sha256_file(src / rel)
        return None if sha256_file(dst / rel) == want else rel

    with ThreadPoolExecutor(max_workers=threads or default_threads()) as pool:
        bad = sorted(filter(None, pool.map(check, files)))
    if bad:
        raise StageError(f"sha256 mismatch after staging to {dst}: {len(bad)} file(s), first: {bad[0]}")
