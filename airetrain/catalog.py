"""The built-in datasets, in one table: what the config's data.name accepts (the schema's enum, checked
by a test), what `airetrain prepare` writes, and what the memory estimate knows of each without the data.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltIn:
    about: str
    meta: dict | None = None   # the shape and classes the model is built for, where known without the data
    writer: str | None = None  # the function of airetrain.stage.prepare that writes it (None: nothing to write)
    data_name: bool = True     # a value of data.name (digits-images is only something `prepare` writes)


DATASETS = {
    "digits": BuiltIn("8x8 handwritten digits (scikit-learn's), 10 classes, as .npy shards",
                      {"shape": [1, 8, 8], "classes": 10}, "prepare_digits"),
    "shapes": BuiltIn("discs and squares with their masks, 3 classes, for segmentation",
                      {"shape": [1, 32, 32], "classes": 3, "task": "segmentation"}, "prepare_shapes"),
    "shapes3d": BuiltIn("balls and cubes with their masks, 3 classes, for 3D segmentation",
                        {"shape": [1, 16, 16, 16], "classes": 3, "task": "segmentation"}, "prepare_shapes3d"),
    "npy": BuiltIn("your own .npy shards (data.path), in the layout prepare writes"),
    "image_folder": BuiltIn("JPEG/PNG files in one folder per class, or their packed shards (data.path)"),
    "synthetic": BuiltIn("random data for benchmarks, made in memory (nothing staged)"),
    "digits-images": BuiltIn("the digits as PNG files in class folders (an image_folder tree)",
                             writer="prepare_digits_images", data_name=False),
}


def data_names() -> list[str]:
    """The built-in values of data.name."""
    return [name for name, d in DATASETS.items() if d.data_name]


def prepared() -> list[str]:
    """The data.name values the workflow writes itself before staging (airetrain prepare)."""
    return [name for name, d in DATASETS.items() if d.data_name and d.writer]


def default_path(name: str) -> str | None:
    """Where a prepared dataset goes on the scratch root when data.path is not set."""
    return f"datasets/{name}" if name in prepared() else None
