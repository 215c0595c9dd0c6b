"""Durable file operations: hash, fsync, and write-then-rename so readers never see half a file."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from .errors import NoSpaceError
from .text import human_bytes

CHUNK = 4 << 20
FULL = (errno.ENOSPC, errno.EDQUOT)   # no space left; over the quota (scratch, on Lustre)


def nearest_existing(path: str | Path) -> Path:
    """path, or its nearest parent that exists (where a directory not made yet will be)."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return path


def mount_point(path: str | Path) -> Path:
    """The directory path's filesystem is mounted at (the nearest existing parent's, for a new path)."""
    path = nearest_existing(path)
    device = os.stat(path).st_dev
    while path.parent != path and os.stat(path.parent).st_dev == device:
        path = path.parent
    return path


def causes(error: BaseException):
    """error and the errors it was raised from or while handling (torch.save's writer turns a failed
    write into a RuntimeError of its own, with the OSError as its context)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


@contextmanager
def room_for(target: str | Path, needed: int, root: str):
    """Writes to target (a file or directory, on the storage root named root) that run out of space
    or quota (an OSError ENOSPC or EDQUOT, or an error raised from one) raise NoSpaceError, naming
    the root, its filesystem, the space free and the size needed (read after the failed write's
    temporary file is removed: what is really free)."""
    try:
        yield
    except Exception as e:
        full = next((c for c in causes(e) if isinstance(c, OSError) and c.errno in FULL), None)
        if full is None or isinstance(e, NoSpaceError):
            raise
        where = mount_point(target)
        free = shutil.disk_usage(where).free
        why = "over its quota" if full.errno == errno.EDQUOT else "full"
        raise NoSpaceError(full.errno, f"{root} is {why} ({os.strerror(full.errno)}): writing {target} needs about "
                                       f"{human_bytes(needed)}, and {where} has {human_bytes(free)} free") from e


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(path: Path) -> Path:
    """Temporary sibling of path: same directory, so the rename is atomic."""
    return path.with_name(f".{path.name}.tmp.{os.getpid()}")


def commit(tmp: Path, final: Path) -> None:
    """Rename a complete, fsynced temporary file into place and make the rename durable."""
    os.replace(tmp, final)
    fsync_dir(final.parent)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:   # a full disk: no temporary file left behind
        tmp.unlink(missing_ok=True)
        raise
    commit(tmp, path)


class HashingWriter:
    """A file to write through that hashes and counts what passes (a whole file's sha256 without a
    second read: a checkpoint as torch.save writes it, a shard as tarfile does)."""

    def __init__(self, f):
        self.f, self.hash, self.size = f, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.f.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.f.flush()


def write_stream_atomic(path: str | Path, produce) -> tuple[int, str]:
    """produce(file) writes the content through a temporary file, fsynced and renamed into place;
    returns its size and sha256, hashed as the bytes pass (no copy of the whole content in memory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            out = HashingWriter(f)
            produce(out)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    commit(tmp, path)
    return out.size, out.hash.hexdigest()


def write_json_atomic(path: str | Path, obj) -> None:
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def copy_atomic(src: str | Path, dst: str | Path, expected_sha256: str | None = None) -> str:
    """Copy src to dst via a fsynced temporary file and a rename; return the copy's sha256.

    The hash is taken from the bytes written, in the same pass; a copy that does not match
    expected_sha256 is deleted, never renamed into place. A kill at any moment leaves
    either the old dst or the complete new one, plus at most a stray temporary file.
    """
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(dst)
    h = hashlib.sha256()
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while block := fin.read(CHUNK):
                h.update(block)
                fout.write(block)
            fout.flush()
            os.fsync(fout.fileno())
        shutil.copystat(src, tmp)
        digest = h.hexdigest()
        if expected_sha256 and digest != expected_sha256:
            raise OSError(f"copy of {src} has sha256 {digest}, expected {expected_sha256}: not promoted")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    commit(tmp, dst)
    return digest


def same_filesystem(path: str | Path, other: str | Path) -> bool:
    """Whether path and other (or other's nearest existing parent) are on one filesystem."""
    return os.stat(path).st_dev == os.stat(nearest_existing(other)).st_dev


def link_atomic(src: str | Path, dst: str | Path) -> bool:
    """Give the file src a second name, dst (a hard link made under a temporary name, renamed into
    place, the directory fsynced); False, with nothing left behind, where src and dst are not on one
    filesystem or it has no hard links.

    Only for files that are never written again under their names, as the trainer's checkpoints
    (each save is a new file renamed into place): the durable name then needs no second copy of the
    bytes, and removing the other name leaves it whole."""
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(dst)
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:   # EXDEV (another filesystem), EPERM or ENOTSUP (no hard links there)
        return False
    commit(tmp, dst)
    return True


def copy_dir_atomic(src: str | Path, dst: str | Path, expected: dict[str, str], link: bool = False) -> bool:
    """Copy the files of directory src (names and sha256s in expected) to dst, all or nothing.

    Each file goes through copy_atomic's checks (or, with link, is hard-linked where it can be:
    see link_atomic) into a temporary sibling directory, which is renamed into place once complete;
    an existing dst (one that did not verify) is moved aside first and removed only after the new
    copy is in place. Returns whether every file was linked."""
    src, dst = Path(src), Path(dst)
    tmp = tmp_name(dst)
    linked = True
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        for name, digest in expected.items():
            if not (link and link_atomic(src / name, tmp / name)):
                copy_atomic(src / name, tmp / name, expected_sha256=digest)
                linked = False
        old = dst.with_name(f".{dst.name}.old.{os.getpid()}")
        if dst.exists():
            os.replace(dst, old)
        commit(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return linked


def read_json(path: str | Path):
    with open(path) as f:
        return json.load(f)
