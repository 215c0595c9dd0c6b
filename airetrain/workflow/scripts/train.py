"""torchrun entry point: `torchrun ... scripts/train.py --plan ... --stage ... --out ...`."""
import os
import sys

from airetrain.train.loop import main

if __name__ == "__main__":
    main()
    # Everything is written and fsynced, and all ranks passed a final barrier. Skip the process
    # group's and the interpreter's teardown: there gloo's worker thread can wait for the GIL
    # while the main thread, holding it, joins that thread (seen here: ranks hung after "done").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
