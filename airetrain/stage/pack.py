"""`airetrain pack SRC DEST`: a directory tree as WebDataset tar shards, with an index of every member.

Lustre pays per file (a metadata operation for each open, stat and create), so a dataset of a million
small files is slow to stage and over the file quota; a few hundred large shards are neither. The
shards and their index are described in airetrain/shards.py.

Deterministic: the same files (paths and bytes) give the same shards, whatever their mtimes, owners
or the number of workers, because members are ordered by key and their tar headers carry fixed
metadata (mode 0644, owner 0, mtime 0).

The writer is tarfile (the standard library), not webdataset's TarWriter: the index needs each
member's data offset as written, which TarWriter does not report, and pack copies files as they are
rather than encoding samples.
"""
from __future__ import annotations

import hashlib
import os
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from ..fsutil import HashingWriter, fsync_dir, read_json, write_bytes_atomic, write_json_atomic
from ..dataset_trees import listing_digest, scan
from ..shards import FORMAT, INDEX, MEMBER_COLUMNS, MEMBERS, WIDS, WORK, sample_key, shard_name
from ..text import clock, human_bytes
from .transfer import StageError, default_threads

DEFAULT_SHARD_BYTES = 512 * 10 ** 6
BLOCK = 512


def _tar_bytes(rel: str, size: int) -> int:
    """A member's bytes in the shard: its header (plus a PAX header for a long name) and padded data."""
    header = BLOCK if len(rel.encode()) <= 100 else 3 * BLOCK + -(-len(rel.encode()) // BLOCK) * BLOCK
    return header + -(-size // BLOCK) * BLOCK


def plan_shards(files: dict[str, tuple[int, int]], shard_bytes: int) -> list[list[str]]:
    """Members in key order, cut into shards of about shard_bytes; a sample is never split."""
    bad = next((rel for rel in files if "\t" in rel or "\n" in rel), None)
    if bad is not None:
        raise StageError(f"cannot pack {bad!r}: tabs and newlines in file names are not supported; rename it")
    shards: list[list[str]] = [[]]
    used, last_key = 0, None
    for rel in sorted(files, key=sample_key):
        key = sample_key(rel)[0]
        cost = _tar_bytes(rel, files[rel][0])
        if key != last_key and shards[-1] and used + cost > shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(rel)
        used += cost
        last_key = key
    return [s for s in shards if s]


class _HashingReader:
    """A member's source file, hashed as tarfile copies it into the shard."""

    def __init__(self, f):
        self.f, self.hash = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.hash.update(data)
        return data


def _members_listing(src: Path, members: list[str], files: dict) -> str:
    return listing_digest({rel: files[rel] for rel in members}) + f":{src}"


def write_shard(src: str, dest: str, index: int, members: list[str], sizes: list[int]) -> dict:
    """Write one shard (temporary name, fsync, rename) and return its record: bytes, sha256 and each
    member's offset, size and sha256. Runs in a worker process."""
    src_path, dest_path = Path(src), Path(dest)
    final = dest_path / shard_name(index)
    tmp = dest_path / f".{final.name}.{os.getpid()}.tmp"
    rows = []
    with open(tmp, "wb") as raw:
        out = HashingWriter(raw)
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, size in zip(members, sizes):
                info = tarfile.TarInfo(rel)
                info.size, info.mtime, info.mode = size, 0, 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(src_path / rel, "rb") as f:
                    if os.fstat(f.fileno()).st_size != size:
                        raise StageError(f"{src_path / rel} changed size while it was packed; pack again")
                    reader = _HashingReader(f)
                    tar.addfile(info, reader)
                data_offset = tar.offset - -(-size // BLOCK) * BLOCK   # tarfile is past the padded data
                rows.append([rel, data_offset, size, reader.hash.hexdigest()])
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, final)
    return {"name": final.name, "bytes": out.size, "sha256": out.hash.hexdigest(), "members": rows}


def _finished(dest: Path, index: int, listing: str) -> dict | None:
    """The record of a shard an earlier pack finished from the same files, if its tar is intact."""
    record_path = dest / WORK / f"{shard_name(index)}.json"
    try:
        record = read_json(record_path)
        ok = record["listing"] == listing and (dest / record["name"]).stat().st_size == record["bytes"]
    except (FileNotFoundError, ValueError, KeyError):
        return None
    return record if ok else None


def pack(src: str | Path, dest: str | Path, shard_bytes: int = DEFAULT_SHARD_BYTES, jobs: int | None = None,
         log=print) -> dict:
    """Pack src into shards under dest (see the module doc); return index.json's contents."""
    src, dest = Path(src).resolve(), Path(dest).resolve()
    if not src.is_dir():
        raise StageError(f"{src} is not a directory")
    if dest == src or src in dest.parents:
        raise StageError(f"the shards ({dest}) cannot go inside the directory being packed ({src})")
    t0 = time.perf_counter()
    files = scan(src)
    if not files:
        raise StageError(f"{src} holds no files")
    shards = plan_shards(files, shard_bytes)
    total = sum(size for size, _ in files.values())
    (dest / WORK).mkdir(parents=True, exist_ok=True)
    for stale in dest.glob(".shard-*.tmp"):  # from an interrupted pack
        stale.unlink()
    for old in dest.glob("shard-*.tar"):     # from an earlier pack of a bigger tree
        if int(old.stem.split("-")[1]) >= len(shards):
            old.unlink()
            (dest / WORK / f"{old.name}.json").unlink(missing_ok=True)

    records: dict[int, dict] = {}
    listings = {i: _members_listing(src, members, files) for i, members in enumerate(shards)}
    for i in range(len(shards)):
        if (record := _finished(dest, i, listings[i])) is not None:
            records[i] = record
    kept = len(records)
    jobs = jobs or default_threads()
    long_names = [rel for rel in files if len(rel.encode()) > 100]
    if long_names:
        log(f"note: {len(long_names)} member name(s) are over 100 bytes, e.g. {long_names[0]}: tar, webdataset "
            "and airetrain read them (PAX headers); the wids reader does not")
    log(f"packing {len(files)} files ({human_bytes(total)}) from {src} into {len(shards)} shards of about "
        f"{human_bytes(shard_bytes)} in {dest}, {jobs} workers"
        + (f"; kept {kept} finished shards from an earlier pack" if kept else ""))
    todo = [i for i in range(len(shards)) if i not in records]
    if todo:
        _write_shards(src, dest, shards, todo, files, listings, records, min(jobs, len(todo)), log)
    fsync_dir(dest)
    index = _write_index(src, dest, [records[i] for i in range(len(shards))], files)
    log(f"packed {index['files']} files into {index['shard_count']} shards ({human_bytes(index['shard_bytes'])}) "
        f"in {time.perf_counter() - t0:.1f} s: {dest / INDEX}")
    return index


def _write_shards(src: Path, dest: Path, shards: list[list[str]], todo: list[int], files: dict, listings: dict,
                  records: dict, jobs: int, log) -> None:
    """Write the shards of todo in worker processes, each recorded as it finishes; progress every 5 s."""
    t0 = time.perf_counter()
    todo_bytes = sum(files[rel][0] for i in todo for rel in shards[i])
    done_bytes, last_log = 0, 0.0
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(write_shard, str(src), str(dest), i, shards[i],
                               [files[rel][0] for rel in shards[i]]): i for i in todo}
        for n, future in enumerate(as_completed(futures), 1):
            i = futures[future]
            record = {**future.result(), "listing": listings[i]}
            write_json_atomic(dest / WORK / f"{record['name']}.json", record)  # marks the shard finished
            records[i] = record
            done_bytes += sum(files[rel][0] for rel in shards[i])
            elapsed = time.perf_counter() - t0
            if n == len(todo) or elapsed - last_log >= 5:
                rate = done_bytes / elapsed
                eta = clock((todo_bytes - done_bytes) / rate) if rate > 0 else "?"
                log(f"pack: {n}/{len(todo)} shards, {human_bytes(done_bytes)} of {human_bytes(todo_bytes)}, "
                    f"{rate / 1e6:.0f} MB/s, ETA {eta}")
                last_log = elapsed


def _folders(files: dict) -> dict[str, int]:
    """Files per directory, two levels deep (train/<class>): the classes, without reading members.tsv."""
    counts: dict[str, int] = {}
    for rel in files:
        parts = rel.split("/")[:-1][:2]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            counts[folder] = counts.get(folder, 0) + 1
    return dict(sorted(counts.items()))


def _write_index(src: Path, dest: Path, records: list[dict], files: dict) -> dict:
    lines = ["\t".join(MEMBER_COLUMNS)]
    for record in records:
        for rel, offset, size, digest in record["members"]:
            lines.append(f"{rel}\t{record['name']}\t{offset}\t{size}\t{digest}")
    write_bytes_atomic(dest / MEMBERS, ("\n".join(lines) + "\n").encode())
    samples = [len({sample_key(m[0])[0] for m in r["members"]}) for r in records]
    shards = [{"name": r["name"], "bytes": r["bytes"], "sha256": r["sha256"], "files": len(r["members"]),
               "samples": n} for r, n in zip(records, samples)]
    index = {
        "format": FORMAT,
        "source": str(src),
        "shard_count": len(shards),
        "files": len(files),
        "samples": sum(samples),
        "bytes": sum(size for size, _ in files.values()),
        "shard_bytes": sum(s["bytes"] for s in shards),
        "folders": _folders(files),
        "shards": shards,
    }
    write_json_atomic(dest / WIDS, {"__kind__": "wids-shard-index-v1", "wids_version": 1,
                                    "name": src.name, "shardlist": [
                                        {"url": s["name"], "nsamples": s["samples"], "filesize": s["bytes"]}
                                        for s in shards]})
    write_json_atomic(dest / INDEX, index)  # last: a complete index means a complete pack
    return index
