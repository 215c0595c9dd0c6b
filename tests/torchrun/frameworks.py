"""Users' scripts written for the frameworks, each with airetrain's one callback, for the tests.

    HF_TRAINER   a Hugging Face Trainer: a small Llama built from a config (nothing downloaded) on
                 counting sequences (each token the last plus one: learnable); a checkpoint every 10
                 steps; a second a step while $HOLD exists; rank 0 saves the final model to
                 results/<run>/final/ and writes its first and last loss to final.json
    LIGHTNING    a LightningModule on the staged digits (read from $AIRETRAIN_DATA_DIR), devices left
                 unset unless --devices=N; a second a step while $HOLD exists; rank 0 appends each
                 session's world and resume to sessions.jsonl, and writes final.json and the weights
                 (final.pt) at the end
"""

HF_TRAINER = '''
import json, os, sys

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

from airetrain.hf import Airetrain


class Paced(TrainerCallback):   # the test's: slow while it holds the run, to stop it part-way
    def on_step_end(self, args, state, control, **kwargs):
        if os.path.exists(os.environ.get("HOLD", "/nonexistent")):
            time.sleep(1)


steps = int(sys.argv[sys.argv.index("--steps") + 1])
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
tokens = (torch.randint(0, 64, (512, 1), generator=g) + torch.arange(33)) % 64
data = [{"input_ids": t, "labels": t} for t in tokens]
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))
args = TrainingArguments(max_steps=steps, per_device_train_batch_size=8, learning_rate=3e-3, save_steps=10,
                         logging_steps=5, use_cpu=True, report_to=[], seed=0, data_seed=0, dataloader_num_workers=0)
plain = "--no-callback" in sys.argv   # the benchmark's baseline: the Trainer without airetrain
trainer = Trainer(model, args, train_dataset=data, callbacks=[] if plain else [Airetrain(), Paced()])
resume = None if plain else Airetrain.resume_path()
speed = trainer.train(resume_from_checkpoint=resume).metrics["train_samples_per_second"]
if trainer.is_world_process_zero():
    results = os.environ["AIRETRAIN_RESULTS_DIR"]
    trainer.save_model(os.path.join(results, "final"))
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    with open(os.path.join(results, "final.json"), "w") as f:
        json.dump({"output_dir": args.output_dir, "first_loss": losses[0], "last_loss": losses[-1],
                   "step": trainer.state.global_step, "resumed_from": resume, "samples_per_s": speed}, f)
'''

LIGHTNING = '''
import json, os, sys, time
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from airetrain.lightning import Airetrain


def split(name):   # the staged digits: x-*.npy and y-*.npy shards
    folder = Path(os.environ["AIRETRAIN_DATA_DIR"]) / name
    x = np.concatenate([np.load(p) for p in sorted(folder.glob("x-*.npy"))])
    y = np.concatenate([np.load(p) for p in sorted(folder.glob("y-*.npy"))])
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))


class Digits(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def training_step(self, batch, _):
        x, y = batch
        if os.path.exists(os.environ.get("HOLD", "/nonexistent")):
            __import__("time").sleep(1)   # the test's: slow while it holds the run
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), sync_dist=True)
        self.log("val_accuracy", (logits.argmax(1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


epochs = int(sys.argv[sys.argv.index("--epochs") + 1])
batch = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 32
devices = [a.split("=")[1] for a in sys.argv if a.startswith("--devices=")]
plain = "--no-callback" in sys.argv   # the benchmark's baseline: Lightning without airetrain (give --devices)
L.seed_everything(0)
trainer = L.Trainer(max_epochs=epochs, callbacks=[] if plain else [Airetrain()], log_every_n_steps=5, logger=False,
                    enable_progress_bar=False, accelerator="cpu", **({"devices": int(devices[0])} if devices else {}))
resume = None if plain else Airetrain.resume_path()
if trainer.is_global_zero:   # each session: its world and the checkpoint it resumes from
    with open(os.path.join(os.environ["AIRETRAIN_RESULTS_DIR"], "sessions.jsonl"), "a") as f:
        f.write(json.dumps({"world_size": trainer.world_size, "resumed_from": resume}) + "\\n")
started = time.perf_counter()
module = Digits()
trainer.fit(module, DataLoader(split("train"), batch_size=batch, shuffle=True),
            DataLoader(split("test"), batch_size=64), ckpt_path=resume)
fit_s = time.perf_counter() - started
if trainer.is_global_zero:
    with open(os.path.join(os.environ["AIRETRAIN_RESULTS_DIR"], "final.json"), "w") as f:
        json.dump({"world_size": trainer.world_size, "step": trainer.global_step, "resumed_from": resume,
                   "val_loss": float(trainer.callback_metrics["val_loss"]), "fit_s": fit_s}, f)
    torch.save(module.state_dict(), os.path.join(os.environ["AIRETRAIN_RESULTS_DIR"], "final.pt"))
'''
