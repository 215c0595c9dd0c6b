#!/usr/bin/env bash
# The GPU checks, in one go, on a machine with an NVIDIA GPU (not part of CI; CPU runs skip them):
# the doctor, the GPU tests (nccl + bf16 + arch check; bit-exact resume after kill -9 for DDP and
# FSDP with the CUDA RNG), the async checkpoint stall with a GPU-resident state, and the GPT bf16
# showcase's MFU.  Usage: bash benchmarks/gpu_check.sh [OUTDIR]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}

nvidia-smi -L | tee "$out/gpu.txt"
$py -m airetrain doctor 2>&1 | tee "$out/doctor.txt"
timeout 170 $py -m pytest -q -p no:cacheprovider -rs -k gpu tests/torchrun/test_trainer.py tests/torchrun/test_checkpoint.py \
  2>&1 | tee "$out/gpu-tests.txt"
timeout 60 $py benchmarks/checkpoint.py --device cuda --every 300 2>&1 | tee "$out/checkpoint-bench.txt"

# GPT in bf16 on one GPU: MFU against the GPU's bf16 peak, from train.json
work=$(mktemp -d)
cat > "$work/gpt.yaml" <<YAML
roots: {scratch: $work/scratch, tmp_shared: $work/fast}
runs:
  gpt: {gpus: 1, strategy: ddp, precision: bf16, compile: ${COMPILE:-false},
        model: {name: gpt, width: 2048, depth: 8, heads: 16},
        data: {name: synthetic, samples: 1024, vocab: 32000, seq_len: 1024, workers: 2},
        batch: {global: 16, per_device: 8}, train: {epochs: 1, log_every_steps: 16},
        checkpoint: {every_epochs: 1}}
YAML
r=$work/results/gpt
timeout 150 bash -c "$py -m airetrain plan --configfile $work/gpt.yaml --write $work/results &&
  $py -m airetrain stage --plan $r/plan.json --out $r/stage.json &&
  $py -m airetrain launch --plan $r/plan.json --stage $r/stage.json --out $r --script scripts/train.py" \
  > "$out/gpt-train.log" 2>&1
tail -5 "$out/gpt-train.log"
$py -c "import json,sys; s=json.load(open('$r/train.json')); print({k: s[k] for k in ('mfu','achieved_tflops','tokens_per_s','gpu_util_mean','gpu_mem_peak_bytes','peak_tflops_per_gpu','step_time_s','checkpoint_stall_s_mean')})" \
  2>&1 | tee "$out/gpt-mfu.txt"
