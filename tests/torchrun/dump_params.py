"""Test entry point for torchrun: scripts/train.py's training, then each rank saves its final
parameters (full, unsharded) to $AIRETRAIN_TEST_DUMP_DIR/rank<N>.pt, to compare the replicas."""
import os
import sys
from pathlib import Path

import torch

from airetrain.train.loop import main

if __name__ == "__main__":
    trained = main()
    out = Path(os.environ["AIRETRAIN_TEST_DUMP_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    params = trained.par.full_state(trained.optimizer)[0]   # a collective under FSDP: every rank calls it
    torch.save(params, out / f"rank{trained.d.rank}.pt")
    torch.distributed.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # as scripts/train.py: skip gloo's teardown
