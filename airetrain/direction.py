"""Which way an evaluation figure is better (checkpoint.mode): the monitor's best checkpoint and a tune's
study read it alike."""
from __future__ import annotations

# what `auto` reads as lower-is-better; every other metric (accuracy, dice, the user's) is higher-is-better
LOWER_IS_BETTER = ("loss", "error", "err", "mse", "mae", "rmse", "perplexity", "ppl", "wer", "cer")


def direction(metric: str, mode: str, declared: dict[str, str]) -> str:
    """min or max: checkpoint.mode, or for auto what the user's metrics function declares
    (its `directions` attribute, {name: "min" | "max"}), else min for a loss or an error, else max."""
    if mode != "auto":
        return mode
    name = metric.removeprefix("eval_")
    if name in declared:
        return declared[name]
    return "min" if name.endswith(LOWER_IS_BETTER) else "max"
