"""torchrun entry point: `torchrun ... scripts/train.py --plan ... --stage ... --out ...`."""
from airetrain.train import main

if __name__ == "__main__":
    main()
