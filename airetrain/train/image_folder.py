"""data.name: image_folder: JPEG/PNG images in one folder per class, labels from the folder names.

Layout (ImageNet's): train/<class>/*.jpg, and test/<class>/ or val/<class>/ for evaluation; a folder
without train/ is all training data. The same tree packed into shards (airetrain pack) reads the
same, member by member in place (airetrain.train.files), in the same order: a run from the folder
and one from its shards see the same bytes.

Pillow decodes; the transforms are the usual ones, written here because torchvision is not a
dependency: resize so the shorter side is 8/7 of the crop (256 for 224), then a random crop and a
left-right flip for training, a centre crop for evaluation. Their random numbers come from numpy's
global generator, which the trainer seeds per sample (datasets.PerSampleSeeds): a resume replays them.
"""
from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from ..dataset_trees import IMAGE_SUFFIXES, image_folder_splits
from ..run_config import Data
from .files import DatasetFiles

RESIZE = 8 / 7


class ImageFolder(Dataset):
    def __init__(self, files: DatasetFiles, prefix: str, classes: list[str], shape: list[int], train: bool,
                 random_crop: bool, random_flip: bool):
        self.files, self.shape, self.train = files, list(shape), train
        self.random_crop, self.random_flip = random_crop, random_flip
        label_of = {name: i for i, name in enumerate(classes)}
        items, labels = [], []
        for i in range(len(files)):
            path = files.path(i)
            if not path.startswith(prefix) or not path.lower().endswith(IMAGE_SUFFIXES):
                continue
            folder = path[len(prefix):].split("/", 1)[0]
            if folder not in label_of or "/" not in path[len(prefix):]:
                raise ValueError(f"{path}: image_folder expects {prefix}<class>/<image>, and the class "
                                 f"{folder!r} is not one of the training classes")
            items.append(i)
            labels.append(label_of[folder])
        if not items:
            raise FileNotFoundError(f"no images ({', '.join(IMAGE_SUFFIXES)}) under {files.root / prefix}")
        self.items, self.labels = np.array(items, np.int64), np.array(labels, np.int64)
        self.meta = {"shape": self.shape, "classes": len(classes), "class_names": classes}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        image = Image.open(io.BytesIO(self.files.read(int(self.items[index]))))
        image = image.convert("L" if self.shape[0] == 1 else "RGB")
        x = torch.from_numpy(self.transform(image)).float().div_(255)
        return (x[None] if x.ndim == 2 else x.permute(2, 0, 1)).contiguous(), int(self.labels[index])

    def transform(self, image: Image.Image) -> np.ndarray:
        height, width = self.shape[1:]
        if not self.random_crop:
            image = image.resize((width, height), Image.BILINEAR)
        else:
            scale = RESIZE * max(height / image.height, width / image.width)
            image = image.resize((max(width, math.ceil(image.width * scale)),
                                  max(height, math.ceil(image.height * scale))), Image.BILINEAR)
            if self.train:
                left = int(np.random.randint(image.width - width + 1))
                top = int(np.random.randint(image.height - height + 1))
            else:
                left, top = (image.width - width) // 2, (image.height - height) // 2
            image = image.crop((left, top, left + width, top + height))
        if self.train and self.random_flip and np.random.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return np.array(image, dtype=np.uint8)


def image_folder(data: Data, root: str | Path) -> tuple[ImageFolder, ImageFolder | None]:
    """(train, test) of an image folder or its shards; test is None without a test/ or val/ split."""
    files = DatasetFiles(root)
    top_level = {files.path(i).split("/", 1)[0] for i in range(len(files)) if "/" in files.path(i)}
    splits = image_folder_splits(top_level)
    prefix = splits["train"]
    classes = sorted({p[len(prefix):].split("/", 1)[0] for i in range(len(files))
                      if (p := files.path(i)).startswith(prefix) and "/" in p[len(prefix):]})
    if not classes:
        raise FileNotFoundError(f"{Path(root) / prefix} has no class folders (<class>/<image>)")
    options = dict(shape=data.shape, random_crop=data.random_crop, random_flip=data.random_flip)
    train = ImageFolder(files, prefix, classes, train=True, **options)
    test = ImageFolder(files, splits["test"], classes, train=False, **options) if splits["test"] else None
    return train, test
