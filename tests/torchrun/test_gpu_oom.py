"""Out of GPU memory, on a real torchrun (2 ranks, gloo): a model that raises CUDA's out-of-memory error for a
training forward pass of more than 16 samples, once its process has trained a few micro-batches, is planned with
a per-device batch of 64. The model's own record of every training forward pass (written by the test's code, not
airetrain's) shows the batches it was given; a peer trained without the limit shows the global batch was held."""
import json

import torch

from conftest import final_state, launch_training, read_json

TIGHT = '''
import os
import time
from pathlib import Path

import torch

from airetrain.checkpoint import store
from airetrain.train.models import build_model

write_file, written = store.write_file, []


def slow_first_write(*args, **kwargs):
    """A slow disk (the test's stand-in): each session's first checkpoint takes 3 s to write, so the
    out-of-memory error two steps later comes while it is still being written."""
    if not written:
        time.sleep(3)
    written.append(1)
    return write_file(*args, **kwargs)


store.write_file = slow_first_write


def tight(meta, cfg):
    """small_cnn on a pretend GPU: a training forward pass of more than `fits` samples raises CUDA's
    out-of-memory error once this process has run `after` of them; each appends its size to shapes-<rank>."""
    model = build_model({**cfg, "name": "small_cnn"}, meta)
    plain, options, seen = model.forward, cfg["options"], [0]

    def forward(x):
        if model.training and torch.is_grad_enabled():
            with open(Path(options["log"]) / f"shapes-{os.environ['RANK']}", "a") as f:
                f.write(f"{len(x)}\\n")
            seen[0] += 1
            if len(x) > options["fits"] and seen[0] > options["after"]:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a test's model)")
        return plain(x)

    model.forward = forward
    return model
'''


def config(log, fits):
    return {"processes": 2, "precision": "fp32", "batch": {"global": 128, "per_device": 64},
            "model": {"name": "oomlab:tight", "options": {"log": str(log), "fits": fits, "after": 5}},
            "train": {"epochs": 2, "log_every_steps": 1}, "checkpoint": {"every_steps": 2, "writer": "thread"}}


def sizes_in_order(path) -> list[int]:
    """The distinct batch sizes of the model's forward passes, in the order they came."""
    runs = []
    for size in map(int, path.read_text().split()):
        if not runs or runs[-1] != size:
            runs.append(size)
    return runs


def test_out_of_gpu_memory_halves_the_batch_twice_holds_the_global_batch_and_finishes(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "oomlab.py").write_text(TIGHT)
    env = {"PYTHONPATH": str(code)}
    log, peer_log = tmp_path / "log", tmp_path / "peer_log"
    log.mkdir()
    peer_log.mkdir()
    out, proc = launch_training(tmp_path / "tight", config(log, fits=16), env=env, cwd=code)
    peer, _ = launch_training(tmp_path / "peer", config(peer_log, fits=10_000), env=env, cwd=code)

    for rank in (0, 1):   # what the model was given: 64, then 32, then 16, and nothing larger again
        assert sizes_in_order(log / f"shapes-{rank}") == [64, 32, 16]
        assert sizes_in_order(peer_log / f"shapes-{rank}") == [64]
    trained = read_json(out / "train.json")
    assert (trained["steps"], trained["global_batch"], trained["per_device_batch"], trained["grad_accum"]) == \
        (22, 128, 16, 4)   # 1437 samples // 128 a step x 2 epochs, to the end
    changes = [{k: c[k] for k in ("from_per_device", "from_grad_accum", "per_device", "grad_accum", "global")}
               for c in trained["batch_changes"]]
    assert changes == [{"from_per_device": 64, "from_grad_accum": 1, "per_device": 32, "grad_accum": 2, "global": 128},
                       {"from_per_device": 32, "from_grad_accum": 2, "per_device": 16, "grad_accum": 4, "global": 128}]
    assert all("out of GPU memory" in c["why"] for c in trained["batch_changes"])
    # each later session resumed from a checkpoint saved before the failing step: the first session's
    # was still being written when it ran out, and the run waited for it rather than start over
    durable = tmp_path / "tight" / "scratch" / "airetrain" / "t"
    starts = [json.loads(line)["resumed_from_step"] for line in (durable / "sessions.jsonl").read_text().splitlines()]
    assert starts[0] == 0 and len(starts) == 3 and 0 < starts[1] <= starts[2] < 22, starts
    for change, resumed in zip(trained["batch_changes"], starts[1:]):
        assert resumed < change["step"]
    # the last session's 16-sample forward passes: 4 a step from where it resumed, and its two before the first
    # step (the FLOP count's, and DDP's settling of its buckets)
    sixteen = (log / "shapes-0").read_text().split().count("16")
    assert sixteen == 4 * (22 - starts[2]) + 2, (sixteen, starts)
    assert "ran out of GPU memory" in proc.stdout + proc.stderr
    # the global batch was held: the weights are the peer's, up to the order of the additions
    ours, theirs = final_state(out, tmp_path / "tight"), final_state(peer, tmp_path / "peer")
    weights = [k for k in theirs if k.startswith("model.") and isinstance(theirs[k], torch.Tensor)]
    assert len(weights) >= 4
    for key in weights:   # rounding apart (a step of the optimizer moves a weight by about 1e-3)
        assert torch.allclose(ours[key], theirs[key], rtol=1e-4, atol=1e-5), key
