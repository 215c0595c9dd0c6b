"""Many small files against their packed shards: staging time and reading throughput.

Makes 100,000 files of 1-64 KiB in 100 class folders, then times
    (a) rsync -a of the folder                 (the plain baseline)
    (b) airetrain stage of the folder          (file by file, parallel GNU cp)
    (c) airetrain pack (once), then stage of the shards (hashed and checked against the index)
    (d) re-staging the unchanged shards
and rsync -a of the shards (the same bytes without the per-file cost). Then it reads every sample in
a random order with 4 loader workers: from the staged shards (airetrain's reader, one pread per
member), from the folder tar extracted from those shards, and, for 5,000 of the samples, from the
shards with the webdataset project's wids reader (its default LRU of 10 open shards, each of which it
indexes by scanning the tar when it opens it).

Prints every figure and the ratios. Goals: shards stage >= 10x faster than rsync of the folder;
re-staging <= 1 % of the first stage; reading the shards >= reading the folder.

    python benchmarks/shards.py [--files 100000] [--dir /filesystem/to/test] [--shard-size 64MB]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from airetrain.stage.pack import pack
from airetrain.stage.staging import stage_dataset
from airetrain.train.files import DatasetFiles
from stage import make_tree   # benchmarks/stage.py: the same small files


WIDS_SAMPLES = 5_000   # wids re-indexes a shard at every miss of its LRU: a whole epoch takes too long


def timed(fn) -> tuple[float, object]:
    os.sync()
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


class Lengths(Dataset):
    """What a loader worker reads of each sample (its byte count): the reading, not the decoding."""

    def __init__(self, dataset, read):
        self.dataset, self.read = dataset, read

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        return len(self.read(self.dataset, i))


def read_rate(dataset, read, workers: int = 4, limit: int | None = None) -> float:
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0)).tolist()[:limit]
    loader = DataLoader(Lengths(dataset, read), batch_size=256, sampler=order, num_workers=workers)
    t0 = time.perf_counter()
    total = sum(int(batch.sum()) for batch in loader)
    seconds = time.perf_counter() - t0
    assert total > 0
    return len(order) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="work here (default: a temporary directory)")
    parser.add_argument("--shard-size", default="64MB", help="shard size for airetrain pack (default 64MB)")
    args = parser.parse_args()
    from airetrain.cli import _bytes

    work = Path(tempfile.mkdtemp(prefix="shards-bench-", dir=args.dir))
    try:
        src = work / "folder"
        total = make_tree(src, args.files, name=lambda i: f"train/class{i % 100:03d}/img{i:07d}.jpg")
        print(f"{args.files:,} files, {total / 1e9:.2f} GB, in {work} (page cache warm: a laptop or node, "
              "not Lustre, which pays more per file)")
        rsync_s, _ = timed(lambda: subprocess.run(["rsync", "-a", f"{src}/", str(work / "rsync")], check=True))
        folder_s, _ = timed(lambda: stage_dataset(src, work / "staged-folder"))
        pack_s, index = timed(lambda: pack(src, work / "shards", _bytes(args.shard_size), log=lambda line: None))
        shards_s, first = timed(lambda: stage_dataset(work / "shards", work / "staged-shards"))
        again_s, again = timed(lambda: stage_dataset(work / "shards", work / "staged-shards"))
        assert first["mode"] == "copied" and again["mode"] == "unchanged" and first["sha256_verified"]
        rsync_shards_s, _ = timed(lambda: subprocess.run(["rsync", "-a", f"{work / 'shards'}/",
                                                          str(work / "rsync-shards")], check=True))

        extracted = work / "extracted"
        extracted.mkdir()
        for shard in index["shards"]:
            subprocess.run(["tar", "-xf", str(work / "staged-shards" / shard["name"]), "-C", str(extracted)],
                           check=True)
        shard_files, folder_files = DatasetFiles(work / "staged-shards"), DatasetFiles(extracted)
        assert len(shard_files) == len(folder_files) == args.files
        read_shards = read_rate(shard_files, lambda d, i: d.read(i))
        read_folder = read_rate(folder_files, lambda d, i: d.read(i))
        import wids
        sys.stderr, quiet = open(os.devnull, "w"), sys.stderr   # wids prints a line per shard it indexes
        try:
            # localname: read the staged shards where they are (wids would otherwise copy each one
            # into its cache directory first)
            wds = wids.ShardListDataset(str(work / "staged-shards" / "wids.json"), transformations=[],
                                        localname=lambda url: url)
            read_wids = read_rate(wds, lambda d, i: d[i][".jpg"].getvalue(), limit=WIDS_SAMPLES)
        finally:
            sys.stderr = quiet

        print(f"(a) rsync -a of the folder:            {rsync_s:8.2f} s")
        print(f"(b) airetrain stage of the folder:     {folder_s:8.2f} s   rsync / stage = {rsync_s / folder_s:.1f}x")
        print(f"(c) airetrain pack (once):             {pack_s:8.2f} s   {index['shard_count']} shards of "
              f"{args.shard_size}")
        print(f"    stage of the shards:               {shards_s:8.2f} s   rsync / shards = {rsync_s / shards_s:.1f}x"
              "   (goal >= 10x)")
        per_file_us = (rsync_s - rsync_shards_s) / args.files * 1e6
        print(f"    rsync -a of the shards:            {rsync_shards_s:8.2f} s   the bytes alone; the folder's "
              f"per-file cost here: {per_file_us:.0f} us a file")
        print(f"(d) re-stage of the unchanged shards:  {again_s:8.4f} s   {again_s / shards_s:.2%} of the first "
              "(goal <= 1 %)")
        print(f"read, 4 workers, random order: shards {read_shards:,.0f} samples/s, folder {read_folder:,.0f} "
              f"samples/s: shards / folder = {read_shards / read_folder:.2f}x (goal >= 1)")
        print(f"    wids, same shards, {WIDS_SAMPLES:,} of the samples: {read_wids:,.0f} samples/s: airetrain / wids = "
              f"{read_shards / read_wids:.1f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
