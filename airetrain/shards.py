"""The shard format `airetrain pack` writes, staging copies and the trainer reads in place.

A packed dataset directory holds

    shard-000000.tar ...   plain POSIX tar shards (`tar -tf` lists them; webdataset and wids read them)
    index.json             the summary: format, shard list (name, bytes, sha256, files), totals, folders
    members.tsv            one line per member: path, shard, offset of its data, size, sha256
    wids.json              the same shards as a `wids` shard list (samples per shard)
    .pack/                 one record per finished shard: what lets an interrupted pack resume

A sample's files, `dir/name.jpg` and `dir/name.json`, share the key `dir/name` (WebDataset's
convention), and sit next to each other in their shard.
"""
from __future__ import annotations

import csv
from pathlib import Path

from .fsutil import read_json

FORMAT = "airetrain-shards/1"
INDEX = "index.json"
MEMBERS = "members.tsv"
WIDS = "wids.json"
WORK = ".pack"   # the pack's resume records beside the shards: never staged
MEMBER_COLUMNS = ("path", "shard", "offset", "size", "sha256")


def shard_name(i: int) -> str:
    return f"shard-{i:06d}.tar"


def sample_key(rel: str) -> tuple[str, str]:
    """(key, extension) as WebDataset splits a member's name: at the first dot of the file name."""
    directory, _, name = rel.rpartition("/")
    stem, dot, ext = name.partition(".")
    return (f"{directory}/{stem}" if directory else stem), ext


def shard_index(root: str | Path) -> dict | None:
    """The index.json of a directory airetrain pack wrote, or None where it is not one."""
    path = Path(root) / INDEX
    if not path.is_file():
        return None
    try:
        index = read_json(path)
    except ValueError:
        return None
    return index if index.get("format") == FORMAT else None


def read_members(root: str | Path, shard_names: list[str], under: str = ""):
    """The members of a packed dataset whose path starts with `under`: (paths, shard numbers, data
    offsets, sizes), the last three as numpy arrays (loader workers share them without copying)."""
    import numpy as np   # here: the plan imports this module at every parse of the workflow

    number = {name: i for i, name in enumerate(shard_names)}
    paths, shards, offsets, sizes = [], [], [], []
    with open(Path(root) / MEMBERS, newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(rows)   # the header
        for rel, shard, offset, size, _ in rows:
            if rel.startswith(under):
                paths.append(rel)
                shards.append(number[shard])
                offsets.append(int(offset))
                sizes.append(int(size))
    return paths, np.array(shards, np.int32), np.array(offsets, np.int64), np.array(sizes, np.int64)
