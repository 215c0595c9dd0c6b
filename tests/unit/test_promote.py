"""promote: the durable copy is all or nothing, verified by hash and by a weights_only load."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from airetrain.checkpoint import store
from airetrain.checkpoint.store import CheckpointError
from airetrain.fsutil import CHUNK, sha256_file
from airetrain.checkpoint.promote import promote


def make_checkpoint(directory, step=10, size_mb=1):
    state = {"model": {"w": torch.randn(size_mb * 262144)}, "optimizer": {}, "trainer": {"step": step, "epoch": 0}}
    entry = store.write_file(state, directory, step, fingerprint="f")
    store.record(directory, entry)
    return entry


def test_promote_copies_verifies_and_records(tmp_path, fast_elsewhere):
    entry = make_checkpoint(tmp_path / "fast")
    result = promote(entry, tmp_path / "scratch" / "ckpt")
    dst = tmp_path / "scratch" / "ckpt" / "step-00000010.pt"
    assert result["verified"] and result["path"] == str(dst) and result["mode"] == "copied"
    assert os.stat(dst).st_ino != os.stat(entry["path"]).st_ino
    assert os.stat(dst).st_dev != os.stat(fast_elsewhere).st_dev   # across filesystems, as on Aire
    assert sha256_file(dst) == entry["sha256"] == result["sha256"]
    assert torch.load(dst, weights_only=True)["trainer"]["step"] == 10
    assert [c[2]["file"] for c in store.candidates([dst.parent], "f")] == ["step-00000010.pt"]
    assert promote(entry, tmp_path / "scratch" / "ckpt")["mode"] == "already durable"


@pytest.mark.parametrize("background", [False, True])
def test_a_corrupt_source_is_never_promoted(tmp_path, fast_elsewhere, background):
    """Copied (the fast root on another filesystem): the copy's hash refuses it, also in the trainer's
    background promotion."""
    entry = make_checkpoint(tmp_path / "fast")
    with open(entry["path"], "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\xff")
    with pytest.raises((OSError, CheckpointError), match="sha256"):
        promote(entry, tmp_path / "scratch", full_check=not background)
    scratch = tmp_path / "scratch"
    assert not scratch.exists() or list(scratch.iterdir()) == []  # not even a temporary file is left


def test_on_one_filesystem_the_durable_checkpoint_is_a_hard_link(tmp_path):
    """A laptop's default roots (both under ./.airetrain): no second copy of the bytes. Removing the
    fast root's name (keep, or the job's purge) leaves the durable one whole; a corrupt file is
    refused before it gets a durable name."""
    entry = make_checkpoint(tmp_path / "fast")
    result = promote(entry, tmp_path / "scratch", full_check=False)
    dst = tmp_path / "scratch" / "step-00000010.pt"
    assert result["mode"] == "linked" and os.stat(dst).st_ino == os.stat(entry["path"]).st_ino
    assert [e["file"] for e in store.entries(tmp_path / "scratch")] == ["step-00000010.pt"]
    os.unlink(entry["path"])
    assert store.verify(dst, result)["trainer"]["step"] == 10
    corrupt = make_checkpoint(tmp_path / "fast2")   # the promote rule's full check refuses it before the link
    with open(corrupt["path"], "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\xff")
    with pytest.raises(CheckpointError, match="sha256"):
        promote(corrupt, tmp_path / "scratch2")
    assert not (tmp_path / "scratch2" / "step-00000010.pt").exists()
    bad = make_checkpoint(tmp_path / "fast", step=20)
    with open(bad["path"], "r+b") as f:
        f.seek(1000)
        f.write(b"\x00\xff")
    with pytest.raises(CheckpointError, match="sha256"):
        promote(bad, tmp_path / "scratch")
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == ["manifest.json", "step-00000010.pt"]


def test_a_file_that_does_not_load_is_refused(tmp_path):
    bad = tmp_path / "fast" / "step-00000001.pt"
    bad.parent.mkdir()
    bad.write_bytes(b"not a checkpoint")
    entry = {"path": str(bad), "file": bad.name, "step": 1, "sha256": sha256_file(bad)}
    with pytest.raises(CheckpointError, match="weights_only"):
        promote(entry, tmp_path / "scratch")


KILLER = """
import sys
from airetrain.fsutil import copy_atomic
copy_atomic(sys.argv[1], sys.argv[2])
"""


def test_kill_mid_copy_leaves_the_previous_checkpoint_intact(tmp_path):
    """SIGKILL the copy while its temporary file is half written: the destination keeps the old bytes.

    The source is a pipe that this test fills with two of the copy's blocks and then holds open: the
    copy has written those and waits for more when it is killed, on any disk however fast."""
    src = tmp_path / "new.pt"
    os.mkfifo(src)
    dst = tmp_path / "durable" / "ckpt.pt"
    dst.parent.mkdir()
    dst.write_bytes(b"previous checkpoint")
    proc = subprocess.Popen([sys.executable, "-c", KILLER, str(src), str(dst)])
    written = 2 * CHUNK
    with open(src, "wb") as pipe:
        pipe.write(os.urandom(written))
        pipe.flush()
        deadline = time.monotonic() + 60
        while True:   # until the copy has written both blocks to its temporary file
            tmps = [p for p in dst.parent.iterdir() if p.name.startswith(".ckpt.pt.tmp")]
            if tmps and tmps[0].stat().st_size == written:
                break
            assert proc.poll() is None and time.monotonic() < deadline, "the copy did not get the two blocks"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL                  # killed mid-copy, not finished
    assert tmps[0].stat().st_size == written                  # half a new checkpoint was on disk ...
    assert dst.read_bytes() == b"previous checkpoint"          # ... and the durable one is untouched


def test_a_retrained_run_keeps_its_new_checkpoints_beside_another_configs(tmp_path):
    """A durable directory still holding a changed config's checkpoints (higher steps, another
    fingerprint): the new run's saves are kept and pruned among themselves; the old ones stay."""
    def save(step, fingerprint):
        (tmp_path / f"step-{step:08d}.pt").write_bytes(b"x")
        store.record(tmp_path, {"file": f"step-{step:08d}.pt", "step": step, "epoch": 0, "kind": "file",
                                "size": 1, "sha256": "0" * 64, "fingerprint": fingerprint}, keep=2)

    save(198, "old")
    save(220, "old")
    save(22, "new")   # before: sorted by step with the old ones, the new checkpoint was deleted at once
    assert (tmp_path / "step-00000022.pt").exists()
    save(44, "new")
    save(66, "new")
    files = sorted(e["file"] for e in store.entries(tmp_path))
    assert files == ["step-00000044.pt", "step-00000066.pt", "step-00000198.pt", "step-00000220.pt"]
    assert not (tmp_path / "step-00000022.pt").exists() and (tmp_path / "step-00000198.pt").exists()


def test_keep_never_prunes_the_last_verified_checkpoint_for_one_that_fails_verification(tmp_path, fast_elsewhere):
    """keep: 1, and the next checkpoint's copy does not verify: the one durable checkpoint stays,
    listed and whole, and the failed one leaves nothing under its name."""
    durable = tmp_path / "scratch"
    good = make_checkpoint(tmp_path / "fast", step=10)
    promote(good, durable, keep=1)
    bad = make_checkpoint(tmp_path / "fast", step=20)
    with open(bad["path"], "r+b") as f:   # the bytes change after they were hashed
        f.seek(2000)
        f.write(b"\x00\xff")
    with pytest.raises((OSError, CheckpointError), match="sha256"):
        promote(bad, durable, keep=1, full_check=False)
    assert [e["step"] for e in store.entries(durable)] == [10]
    assert sorted(p.name for p in durable.iterdir()) == [store.MANIFEST, store.file_name(10)]
    store.verify(durable / store.file_name(10), good)


def test_weights_of_a_model_with_tied_parameters_are_written_and_load_back(tmp_path):
    """A language model's embedding and output layer share one tensor: safetensors refuses two names
    for one storage, so the second gets a copy; loading gives the same model."""
    import hashlib

    import torch
    from safetensors.torch import load_file
    from torch import nn

    from airetrain.checkpoint.weights import write_weights

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.out = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
            self.out.weight = self.embed.weight

        def forward(self, x):
            return self.out(self.embed(x))

    model = Tied()
    state = {"model": model.state_dict(), "optimizer": {}, "trainer": {"step": 3, "epoch": 0}}
    entry = store.write_file(state, tmp_path, 3, fingerprint="f")
    weights = write_weights(entry)
    assert weights["path"] == str(tmp_path / "model.safetensors") and weights["step"] == 3
    assert hashlib.sha256((tmp_path / "model.safetensors").read_bytes()).hexdigest() == weights["sha256"]
    fresh = Tied()
    fresh.load_state_dict(load_file(tmp_path / "model.safetensors"))
    x = torch.arange(10)
    assert torch.equal(fresh(x), model(x)) and fresh.out.weight is fresh.embed.weight


def best_checkpoint(directory, step, best_step):
    state = {"model": {"w": torch.full((4,), float(step))}, "optimizer": {},
             "trainer": {"step": step, "epoch": step // 10,
                         "monitor": {"best": {"step": best_step, "epoch": best_step // 10, "metric": "eval_loss",
                                              "value": 0.5}}}}
    entry = store.write_file(state, directory, step, fingerprint="f")
    return entry


def test_keep_never_prunes_the_best_checkpoint_and_promote_best_verifies_it(tmp_path, fast_elsewhere):
    from airetrain.checkpoint.promote import promote_best

    fast, durable = tmp_path / "fast", tmp_path / "scratch" / "ckpt"
    for step in (10, 20, 30, 40):
        entry = best_checkpoint(fast, step, best_step=20)
        store.record(fast, entry, keep=1)
        final = promote(entry, durable, keep=1)
    assert [e["step"] for e in store.entries(fast)] == [20, 40] == [e["step"] for e in store.entries(durable)]
    assert sorted(p.name for p in durable.glob("step-*")) == ["step-00000020.pt", "step-00000040.pt"]
    best = promote_best(final, durable, keep=1)
    assert best["step"] == 20 and best["verified"] and best["path"] == str(durable / "step-00000020.pt")
    assert torch.load(best["path"], weights_only=True)["model"]["w"][0] == 20.0

    # lost on scratch (a kill before its background promotion), it is promoted from the fast root
    (durable / "step-00000020.pt").unlink()
    store.record(durable, final, keep=1)
    manifest = store._manifest(durable)
    manifest["checkpoints"] = [e for e in manifest["checkpoints"] if e["step"] != 20]
    (durable / store.MANIFEST).write_text(__import__("json").dumps(manifest))
    assert promote_best(final, durable, keep=1)["mode"] == "copied"
    assert sha256_file(durable / "step-00000020.pt") == store.entries(fast)[0]["sha256"]

    # a session that resumed from the fast root records its final checkpoint as written on scratch: the
    # fast root is still looked in, where the final one's record no longer points
    (durable / "step-00000020.pt").unlink()
    (durable / store.MANIFEST).write_text(__import__("json").dumps(manifest))
    resumed = {**final, "source": final["path"]}
    assert promote_best(resumed, durable, keep=1, fast_dir=lambda: fast, run="t")["mode"] == "copied"
    (fast / "step-00000020.pt").unlink()
    (durable / "step-00000020.pt").unlink()
    for d in (fast, durable):
        m = store._manifest(d)
        m["checkpoints"] = [e for e in m["checkpoints"] if e["step"] != 20]
        (d / store.MANIFEST).write_text(__import__("json").dumps(m))
    with pytest.raises(CheckpointError) as lost:
        promote_best(resumed, durable, keep=1, fast_dir=lambda: fast, run="t")
    assert str(lost.value) == (f"the best checkpoint (step 20, eval_loss 0.5) is in none of {durable}, {fast}: no copy "
                               "of it is left to promote. To train run t again from step 0: airetrain restart t")
    assert promote_best({"step": 40, "path": str(durable / "step-00000040.pt")}, durable) is None
