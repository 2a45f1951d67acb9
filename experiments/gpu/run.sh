#!/usr/bin/env bash
# GPU runbook: the `gpu` tier (experiments/README.md, "GPU protocol") in one command that ends
# inside one device call (BUDGET_S, default 540 s = 9 min, from its start).
#
#   experiments/gpu/run.sh            # on the GPU machine
#   experiments/gpu/run.sh --dry-run  # on a CPU: the whole path at tiny sizes (a test)
#
# What it does: checks the corpus against the committed manifest (sha256 of every shard),
# prints the planner's protocol, starts WORKERS sweep processes (the planner's K) that share
# the GPU and claim runs through lock files, each training its runs in process one after
# another (compiled once per worker). Order: every cell with seed 0, then seed 1, then extra
# seeds 2-4 while time is left. A run that would end after the deadline is not started; at the
# hard stop any run still going is terminated and leaves nothing. Every finished run is one
# results file (experiments/gpu/results/<cell>-seed<k>.json), written as it finishes: running
# the same command again continues where it stopped. At the end: measured speed against the
# planner's assumptions, and the table (experiments/gpu/tables.md via report.py --tier gpu).
#
# Environment: CORPUS (data/debdocs), RESULTS (experiments/gpu/results), BUDGET_S (540),
# WORKERS (the planner's), PYTHON, RUNBOOK_SET (extra sweep.py arguments). Missing wheels (pytorch-optimizer for SOAP) are installed
# from .whl/ when that folder was carried.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
START=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
MANIFEST=experiments/gpu/corpus-manifest.json
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OPTS=()

if [ "$DRY" = 1 ]; then
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    CORPUS=$TMP/corpus
    RESULTS=${RESULTS:-$TMP/results}
    LOGS=$TMP/logs
    REPORT=$TMP/report
    # the full-size protocol: its arithmetic, and every configuration resolving (no data read)
    "$PY" experiments/gpu/plan.py --manifest "$MANIFEST"
    "$PY" experiments/sweep.py --tier gpu --tables gpu --seeds 0,1 --validate-only \
        --set delay.track_updates=false > "$TMP/validate.txt"
    tail -n 1 "$TMP/validate.txt"
    echo "full-size configurations valid: $(grep -c '^ok ' "$TMP/validate.txt") of 24"
    # a small corpus in the same layout (the embedded KJV), then the same path at tiny sizes
    "$PY" -m asyncpp.data.corpus_build fixture --out "$CORPUS"
    "$PY" -m asyncpp.data.corpus_build verify "$CORPUS"
    SEEDS=(--seeds 0)
    WORKERS=${WORKERS:-2}
    EST=5
    SET=(--set run.device=cpu --set run.precision=fp32 --set run.compile=false
         --set run.threads=1 --set train.steps=3 --set train.batch_size=2
         --set train.eval_every=0 --set train.eval_batches=1 --set data.seq_len=32
         --set model.vocab_size=512 --set model.dim=32 --set model.n_layers=2
         --set model.n_heads=2 --set model.n_kv_heads=1 --set model.ffn_dim=64)
else
    CORPUS=${CORPUS:-data/debdocs}
    RESULTS=${RESULTS:-experiments/gpu/results}
    LOGS=${LOGS:-runs/gpu-logs}
    REPORT=experiments/gpu
    # On the lent device only what is written under $OUT comes back, also after a time-out:
    # results go there as they finish (with the finished ones of earlier calls, which travel
    # in the working tree), and are copied back into $RESULTS at the end. $OUT/gpu has the
    # tier's layout: gpu/results/*.json and gpu/tables.md.
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
        mkdir -p "$OUT/gpu/results" "$RESULTS"
        cp -n "$RESULTS"/*-seed*.json "$OUT/gpu/results/" 2>/dev/null || true
        KEEP=$RESULTS
        RESULTS=$OUT/gpu/results
        LOGS=$OUT/logs
        REPORT=$OUT/gpu
    fi
    if ! "$PY" -c "import pytorch_optimizer" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --target /tmp/asyncpp-site .whl/*.whl
        export PYTHONPATH="/tmp/asyncpp-site:$PYTHONPATH"
    fi
    if ! "$PY" -c "import pytorch_optimizer" 2>/dev/null; then
        echo "warning: pytorch-optimizer is missing (carry .whl/): SOAP cells are left out" >&2
        OPTS=(--optimizers muon,adamw)
    fi
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader || true
    "$PY" -m asyncpp.data.corpus_build verify "$CORPUS" --expect "$MANIFEST"
    "$PY" experiments/gpu/plan.py --corpus "$CORPUS"
    "$PY" experiments/gpu/plan.py --corpus "$CORPUS" --check
    SEEDS=()
    # K workers compile at once on 16 cores: 2 inductor compile threads each, not 16
    export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2}
    WORKERS=${WORKERS:-$("$PY" experiments/gpu/plan.py --corpus "$CORPUS" --get packed)}
    EST=$("$PY" experiments/gpu/plan.py --corpus "$CORPUS" --get first_run_s)
    read -ra SET <<< "${RUNBOOK_SET:-}"  # extra sweep arguments (checking the path on a CPU)
fi

DEADLINE=$((START + BUDGET_S - 25))  # 25 s kept for the table at the end
HARD_STOP=$((START + BUDGET_S - 15))
mkdir -p "$LOGS" "$RESULTS"
echo "runbook: $WORKERS workers, deadline in $((DEADLINE - $(date +%s))) s, results in $RESULTS"
pids=()
for i in $(seq 1 "$WORKERS"); do
    "$PY" experiments/sweep.py --tier gpu --tables gpu --results "$RESULTS" --in-process \
        --deadline "$DEADLINE" --run-estimate-s "$EST" "${SEEDS[@]}" "${OPTS[@]}" \
        --set "data.path=$CORPUS/debdocs_train_*.bin" \
        --set "data.val_path=$CORPUS/debdocs_val_*.bin" \
        --set "data.tokenizer=$CORPUS/tokenizer.json" \
        --set delay.track_updates=false "${SET[@]}" > "$LOGS/worker-$i.log" 2>&1 &
    pids+=($!)
done
# Hard stop: a worker still running then gets SIGTERM (its current run leaves no file).
(
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep $((HARD_STOP - $(date +%s))) & s=$!
    wait "$s"
    kill -TERM "${pids[@]}"
) >/dev/null 2>&1 &
watchdog=$!
failed=0
stopped=0
for p in "${pids[@]}"; do
    rc=0
    wait "$p" || rc=$?
    if [ "$rc" -eq 143 ]; then
        stopped=$((stopped + 1))  # the hard stop: its unfinished run is simply still to do
    elif [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
    fi
done
kill "$watchdog" 2>/dev/null || true
wait "$watchdog" 2>/dev/null || true

grep -h -E " (ok|diverged) val |^stop:|Error|error" "$LOGS"/worker-*.log | sort || true
"$PY" experiments/gpu/plan.py --measured "$RESULTS" --since "$START" --workers "$WORKERS"
"$PY" experiments/report.py --tier gpu --results "$RESULTS" --out "$REPORT" >/dev/null
sed -n '/^## GPU tier/,/^## /p' "$REPORT/tables.md" | sed '$d'
if [ -n "${KEEP:-}" ]; then
    cp "$RESULTS"/*-seed*.json "$KEEP/" 2>/dev/null || true
fi
n=$(find "$RESULTS" -maxdepth 1 -name "*-seed*.json" | wc -l)
echo "GPU runbook: $n results in $RESULTS, $failed worker(s) failed, $stopped stopped at the" \
    "hard stop, wall $(( $(date +%s) - START )) s"
if [ "$DRY" = 1 ]; then
    want=12
    if [ "$n" -ne "$want" ] || [ "$failed" -ne 0 ]; then
        echo "dry run FAILED: $n of $want results, $failed worker(s) failed" >&2
        tail -n 30 "$LOGS"/worker-*.log >&2
        exit 1
    fi
    # resumable: the same command again finds every run done and trains nothing
    again=$("$PY" experiments/sweep.py --tier gpu --tables gpu --results "$RESULTS" \
        --in-process "${SEEDS[@]}" "${SET[@]}" | tail -n 1)
    echo "second invocation: $again"
    echo "dry run ok: $n of $want cells ran end to end and wrote results"
fi
[ "$failed" -eq 0 ]
