#!/usr/bin/env bash
# GPU runbook: SmolLM2-135M shape on one H200 — sync (1F1B), async (PipeDream-2BW, delay 1) and
# async + EF, for Muon and AdamW: 6 runs of 500 steps x 16 x 512 = 4,096,000 tokens each
# (configs/gpu135.toml), bf16 autocast, one process (the exact DelayedOptimizer simulation of
# the 2-stage pipeline). Budget: < 10 minutes in total on one H200 (see experiments/README.md).
# Results: experiments/results/gpu135-<opt>-<mode>-seed0.json (report.py adds a GPU table).
#
#   experiments/gpu/run_135m.sh            # on the GPU machine
#   experiments/gpu/run_135m.sh --dry-run  # on a CPU: validate the full-size configs, then run
#                                          # every cell for 2 steps on a shrunk model (CPU)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

if [ "${1:-}" = "--dry-run" ]; then
    OUT=$(mktemp -d)
    trap 'rm -rf "$OUT"' EXIT
    # 1. the six full-size configurations resolve and validate (135M params, 4.1M tokens each)
    "$PY" experiments/sweep.py --tables gpu --validate-only
    # 2. every cell runs 2 steps end to end on the CPU (width/depth shrunk to fit a CPU test;
    #    vocabulary, data pipeline, schedules, corrections and results writing are the real ones)
    "$PY" experiments/sweep.py --tables gpu --results "$OUT" \
        --set run.device=cpu --set run.precision=fp32 --set run.threads=1 \
        --set train.steps=2 --set train.batch_size=2 --set train.eval_every=0 \
        --set train.eval_batches=1 --set data.seq_len=32 \
        --set model.dim=32 --set model.n_layers=2 --set model.n_heads=2 \
        --set model.n_kv_heads=1 --set model.ffn_dim=64
    n=$(ls "$OUT"/gpu135-*-seed0.json 2>/dev/null | wc -l)
    if [ "$n" -ne 6 ]; then
        echo "dry run FAILED: $n of 6 results written" >&2
        exit 1
    fi
    echo "dry run ok: 6 of 6 cells ran 2 steps and wrote results JSON"
    exit 0
fi

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
START=$(date +%s)
"$PY" experiments/sweep.py --tables gpu --set run.device=cuda --set run.threads=0
echo "GPU runbook wall time: $(( $(date +%s) - START )) s"
"$PY" experiments/report.py
