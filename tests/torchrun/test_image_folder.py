"""image_folder on 2 ranks: the digits written as PNG class folders, packed into shards, staged and read
in place; the same run from the plain folder sees the same bytes and ends bit-identical, and a killed
run from the shards resumes bit-exactly (the random crops are seeded per sample)."""
import pytest

from airetrain.stage.prepare import prepare_digits_images
from airetrain.stage.pack import pack
from conftest import assert_identical, launch_training, read_json
from conftest import final_state
from test_checkpoint import killed_and_resumed_equals_uninterrupted

ACCURACY = 0.9   # measured: 0.975 after 3 epochs (random crops, no flips)


@pytest.fixture(scope="module")
def digits_images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    folder = prepare_digits_images(root / "digits")
    pack(folder, root / "digits-shards", shard_bytes=100_000, log=lambda line: None)   # 19 shards
    return folder, root / "digits-shards"


def config(path, workers):
    return {"processes": 2, "precision": "fp32", "batch": {"global": 32, "per_device": 16},
            "data": {"name": "image_folder", "path": str(path), "shape": [1, 8, 8], "random_flip": False,
                     "workers": workers},
            "train": {"epochs": 3, "log_every_steps": 20}, "checkpoint": {"every_steps": 4}}


def test_from_shards_as_from_the_folder_and_resumed_bit_exactly_after_a_kill(tmp_path, digits_images):
    folder, shards = digits_images
    summary = killed_and_resumed_equals_uninterrupted(tmp_path, config(shards, workers=1), steps=3 * (1437 // 32))
    stage = read_json(tmp_path / "cut" / "results" / "t" / "stage.json")
    assert stage["format"] == "shards" and stage["files"] == 19 + 3 and stage["sha256_verified"]
    assert summary["eval_accuracy"] > ACCURACY, f"measured {summary['eval_accuracy']}"
    out, _ = launch_training(tmp_path / "folder", config(folder, workers=0))
    from_folder = read_json(out / "train.json")
    assert read_json(out / "stage.json")["files"] == 1797   # file by file
    assert from_folder["eval_accuracy"] == summary["eval_accuracy"]
    assert_identical(final_state(out, tmp_path), final_state(tmp_path / "ref" / "results" / "t", tmp_path))
