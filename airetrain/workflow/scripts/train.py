"""torchrun entry point: `torchrun ... scripts/train.py --plan ... --stage ... --out ...`."""
import os
import sys

if __name__ == "__main__":
    # imported here, not above: the checkpoint writer's process (multiprocessing's spawn) runs this file
    # again as its __mp_main__, and needs none of the trainer (nor the DCP and DTensor it imports)
    from airetrain.train.loop import main

    main()
    # Everything is written and fsynced, and all ranks passed a final barrier. Skip the process
    # group's and the interpreter's teardown: there gloo's worker thread can wait for the GIL
    # while the main thread, holding it, joins that thread (seen here: ranks hung after "done").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
