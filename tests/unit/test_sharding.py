"""train/sharding.py: FSDP and activation-checkpointing units for models shaped as users write them."""
import pytest
from torch import nn

from airetrain.train.models import build_model
from airetrain.train.parallel.fsdp_units import find_units


class LayersAsAttributes(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(64, 128), nn.Linear(128, 128), nn.Linear(128, 10)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x.flatten(1))))))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.mlp = nn.Linear(16, 16), nn.Linear(16, 16)


class Decoder(nn.Module):
    """A Hugging Face-style decoder: the layers one level down, in model.layers."""
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.model = nn.Module()
        self.model.layers = nn.ModuleList(Layer() for _ in range(4))
        self.lm_head = nn.Linear(16, 50)


def test_the_repeated_layers_nested_one_level_down():
    units = find_units(Decoder())
    assert units.how == "repeated blocks of model.layers"
    assert units.describe() == {"how": "repeated blocks of model.layers", "count": 4, "classes": {"Layer": 4}}


def test_a_sequential_shards_its_repeated_layers():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    assert find_units(model).describe()["classes"] == {"Linear": 3}


def test_layers_as_attributes_are_large_submodules():
    units = find_units(LayersAsAttributes())
    # fc3 holds 5 % of the parameters: it stays with the root unit
    assert units.how == "large submodules" and [u.name for u in units.units] == ["fc1", "fc2"]


def test_a_model_of_one_layer_is_one_unit():
    assert find_units(nn.Linear(4, 2)).describe() == {"how": "whole model", "count": 0, "classes": {}}


def test_the_built_in_transformers_shard_their_blocks():
    gpt = build_model({"name": "gpt", "width": 32, "depth": 3, "heads": 4}, {"vocab": 50, "seq_len": 8})
    assert find_units(gpt).describe() == {"how": "repeated blocks of blocks", "count": 3,
                                          "classes": {type(gpt.blocks[0]).__name__: 3}}


def test_named_units_and_a_name_the_model_lacks():
    assert find_units(Decoder(), ["Layer"]).describe()["count"] == 4
    with pytest.raises(ValueError, match=r"model.fsdp_units = \['Block'\]: the model has no submodule.*Layer"):
        find_units(Decoder(), ["Block"])
