#!/usr/bin/env bash
# The GPU checks, in one go and within about 8 minutes, on a machine with an NVIDIA GPU (not part of
# CI; CPU runs skip the GPU tests). Writes every log to OUTDIR and one file of figures,
# OUTDIR/summary.json:
#   - the doctor;
#   - every GPU test: nccl + bf16 + arch check, and bit-exact resume after kill -9 for DDP and FSDP;
#   - the checkpoint cost with a GPU-resident state, saves spaced wider than one write (stall, slowed
#     steps, total against a synchronous save);
#   - a GPT of about 1.07 B parameters in bf16 on one GPU, 10 warm-up + 300 steady steps, three ways:
#     plain, torch.compile, torch.compile + fused AdamW: steady-state MFU, tokens/s, compile time;
#     the GPU table's type for CUDA's name of the GPU, and NVML's energy counter (mean watts);
#   - the node check's GPU part (health/checks.py): every GPU answers a matmul, and NVML finds each GPU
#     by CUDA's UUID and reads its memory error counters (which this GPU has, and what they say).
# Usage: bash benchmarks/gpu_check.sh [OUTDIR]   (GPT_STEADY=300 GPT_DEPTH=20 to change the GPT)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$(realpath -m "${1:-gpu-check}")
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py=${PYTHON:-python3}
started=$(date +%s)
stamp() { echo "[gpu-check $(( $(date +%s) - started )) s] $*"; }

nvidia-smi -L | tee "$out/gpu.txt"
$py -m airetrain doctor > "$out/doctor.txt" 2>&1
stamp "GPU tests"
timeout 200 $py -m pytest -q -p no:cacheprovider -rs -k gpu tests/torchrun/test_trainer.py \
  tests/torchrun/test_checkpoint.py > "$out/gpu-tests.txt" 2>&1
tail -3 "$out/gpu-tests.txt"
stamp "node check, GPU part"
timeout 60 $py - > "$out/health.json" 2>&1 <<'PY'
import json
import torch
from airetrain.health.checks import gpu_memory_reasons, gpu_problems
count = torch.cuda.device_count()
found = {"gpus": count, "problems": gpu_problems(count), "nvml": {}}
try:
    import pynvml as nvml
    nvml.nvmlInit()
    for i in range(count):
        uuid = str(torch.cuda.get_device_properties(i).uuid)
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        counters = {}
        readers = {"remapped_rows": (nvml.nvmlDeviceGetRemappedRows, ()),
                   "retired_pages_pending": (nvml.nvmlDeviceGetRetiredPagesPendingStatus, ()),
                   "ecc_uncorrected": (nvml.nvmlDeviceGetTotalEccErrors,
                                       (nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC))}
        for name, (fn, args) in readers.items():
            try:
                counters[name] = str(fn(handle, *args))
            except Exception as e:   # this GPU has no such counter
                counters[name] = f"not read: {e}"
        found["nvml"][f"GPU {i} ({uuid})"] = {"counters": counters, "reasons": gpu_memory_reasons(nvml, handle)}
except Exception as e:
    found["nvml"] = f"not used: {type(e).__name__}: {e}"
print(json.dumps(found, indent=1))
PY
tail -4 "$out/health.json"
stamp "checkpoint cost"
# a save every 600 steps (about 2.5 s): more than one background write apart; the fast root on
# another filesystem than scratch (/dev/shm), as on Aire, so that each checkpoint is copied
for w in process thread; do   # checkpoint.writer: auto takes the process on GPUs; this measures both
  fast=$(mktemp -d /dev/shm/airetrain-ckpt-fast-XXXXXX)
  timeout 60 $py benchmarks/checkpoint.py --device cuda --every 600 --saves 3 --writer $w --fast-dir "$fast" \
    > "$out/checkpoint-$w.txt" 2>&1
  rm -rf "$fast"
  tail -1 "$out/checkpoint-$w.txt"
done

# GPT, width 2048 x depth 20 (1.01 B in the blocks, 1.07 B with the tied 32k embedding), sequences
# of 1024, micro-batch 8, one GPU. One root for both roots: the 17 GB final checkpoint is written
# once, not copied; each run's directory is removed after it.
steady=${GPT_STEADY:-300}
samples=$(( (steady + 10) * 8 ))
gpt() {   # name, compile, fused
  local work="$out/work-$1"
  rm -rf "$work" && mkdir -p "$work"
  cat > "$work/gpt.yaml" <<YAML
roots: {scratch: $work/root, tmp_shared: $work/root}
runs:
  $1: {gpus: 1, strategy: ddp, precision: bf16, compile: $2, optim: {fused: $3},
       model: {name: gpt, width: 2048, depth: ${GPT_DEPTH:-20}, heads: 16},
       data: {name: synthetic, samples: $samples, vocab: 32000, seq_len: 1024, workers: 2},
       batch: {global: 8, per_device: 8}, train: {epochs: 1, log_every_steps: 50, hang_timeout_min: 0},
       checkpoint: {every_epochs: 1, keep: 1}, time_min: {train: 30}}
YAML
  local r="$work/results/$1"
  stamp "GPT $1 (compile $2, fused $3)"
  timeout 170 bash -c "$py -m airetrain plan --configfile $work/gpt.yaml --write $work/results >/dev/null &&
    $py -m airetrain stage --plan $r/plan.json --out $r/stage.json &&
    $py -m airetrain launch --plan $r/plan.json --stage $r/stage.json --out $r --script airetrain/workflow/scripts/train.py" \
    > "$out/gpt-$1.log" 2>&1
  cp "$r/train.json" "$out/gpt-$1.train.json" 2>/dev/null
  grep -E "warm-up|done:" "$out/gpt-$1.log" | tail -2
  rm -rf "$work"
}
gpt plain false null
gpt compiled true null
gpt compiled-fused true true

$py - "$out" <<'PY' 2>&1 | tee "$out/summary.json"
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = {"gpu": (out / "gpu.txt").read_text().strip()}
tests = (out / "gpu-tests.txt").read_text() if (out / "gpu-tests.txt").exists() else ""
summary["gpu_tests"] = (re.findall(r"^\d+ (?:passed|failed).*$", tests, re.M) or ["did not finish"])[-1]
try:
    summary["node_check"] = json.loads((out / "health.json").read_text())
except Exception as e:   # on CPU: no CUDA; or the check failed (its log is health.json)
    summary["node_check"] = f"did not finish: {e}"
for w in ("process", "thread"):
    bench = (out / f"checkpoint-{w}.txt").read_text() if (out / f"checkpoint-{w}.txt").exists() else ""
    for key, pattern in {"sync_ms": r"fsync: median (\d+) ms", "stall_ms": r"stall:\s+median (\d+) ms",
                         "total_ms": r"= (\d+) ms; ratio", "total_ratio": r"total / synchronous: ([\d.]+)"}.items():
        found = re.search(pattern, bench)
        summary[f"checkpoint_{w}_{key}"] = float(found.group(1)) if found else None
for name in ("plain", "compiled", "compiled-fused"):
    path = out / f"gpt-{name}.train.json"
    if not path.exists():
        summary[f"gpt_{name}"] = "did not finish"
        continue
    t = json.loads(path.read_text())
    summary[f"gpt_{name}"] = {k: t.get(k) for k in ("steady_mfu", "steady_tokens_per_s", "steady_achieved_tflops",
                                                    "steady_steps", "warmup_s", "mfu", "peak_tflops_per_gpu",
                                                    "gpu_mem_peak_bytes", "flops_per_step", "checkpoint_final_wait_s",
                                                    "gpu_name", "gpu_energy_j", "train_seconds")}
    # the GPU table knows this GPU (its name as CUDA says it), and NVML's energy counter moved: J per second
    from airetrain.cluster.hardware import gpu_facts
    facts = gpu_facts(t.get("gpu_name"))
    summary[f"gpt_{name}"]["table_type"] = facts and facts["type"]
    if t.get("gpu_energy_j") and t.get("train_seconds"):
        summary[f"gpt_{name}"]["gpu_mean_w"] = round(t["gpu_energy_j"] / t["train_seconds"], 1)
print(json.dumps(summary, indent=1))
PY
stamp "done"
