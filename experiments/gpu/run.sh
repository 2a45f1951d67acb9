#!/usr/bin/env bash
# GPU runbook: the `gpu` tier, the compute-optimal ladder's 1.26M rung (experiments/README.md,
# "GPU protocol"), in one command that ends inside one device call (BUDGET_S, default 540 s =
# 9 min, from its start).
#
#   experiments/gpu/run.sh            # on the GPU machine
#   experiments/gpu/run.sh --dry-run  # on a CPU: the whole path at tiny sizes (a test)
#
# What it does: checks the corpus against the committed manifest (sha256 of every shard),
# that the tree is committed (results name the code that made them), and that the transfer
# rule has opt-180k's lr choices; prints the planner's protocol; starts WORKERS workers
# (experiments/gpu/worker.py, the planner's K) that share the GPU and claim runs through lock
# files, each training its runs in process one after another (compiled once per worker).
# Each worker runs the ladder's tables as experiments/ladder.sh does: opt-lr (seed 0, 3-point
# grids around opt-180k's choices, the centres of every (optimizer, mode) first, Muon and
# AdamW first) pass after pass while a grid extends past an edge, then opt-claims (seeds 1
# and 2; seed 0 is the lr run, reused). A run that would end after the deadline is not
# started; at the hard stop any run still going is terminated and leaves nothing. Every
# finished run is one results file (experiments/gpu/results/<cell>-seed<k>.json), written as
# it finishes: running the same command again continues where it stopped. At the end:
# measured speed against the planner's assumptions, and the ladder's tables for the gpu tier
# (experiments/gpu/tables.md via report.py --tier gpu).
#
# Environment: CORPUS (data/debdocs), RESULTS (experiments/gpu/results), BUDGET_S (540),
# WORKERS (the planner's), PYTHON, RUNBOOK_SET (extra sweep.py arguments), ALLOW_DIRTY=1
# (train from an uncommitted tree, recording its diff's sha256), ASYNCPP_LR_TRANSFER (the
# folder of opt-180k's lr results the transfer rule reads; default
# experiments/opt-180k/results; the dry run points it at a stand-in written by
# experiments/gpu/transfer_fixture.py). pytorch-optimizer (SOAP) is installed from .whl/ when
# that folder was carried; without it the runbook stops before training.
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

if [ "$DRY" = 1 ]; then
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    CORPUS=$TMP/corpus
    RESULTS=${RESULTS:-$TMP/results}
    LOGS=$TMP/logs
    REPORT=$TMP/report
    ALLOW_DIRTY=1  # the dry run's results are thrown away: the tree need not be committed
    # opt-180k's lr choices: a stand-in at 1/16 of the ladder's centres, so that at 4 steps
    # the upper edge wins and the gpu tier's grids extend (the loop is exercised)
    export ASYNCPP_LR_TRANSFER=$TMP/opt-180k-results
    "$PY" experiments/gpu/transfer_fixture.py --out "$ASYNCPP_LR_TRANSFER" --shift -4
    # the full-size protocol: its arithmetic, and every first-pass configuration resolving
    "$PY" experiments/gpu/plan.py --manifest "$MANIFEST"
    "$PY" experiments/sweep.py --tier gpu \
        --tables opt-lr --results "$TMP/none" --validate-only \
        --set delay.track_updates=false > "$TMP/validate.txt"
    tail -n 1 "$TMP/validate.txt"
    echo "full-size configurations valid: $(grep -c '^ok ' "$TMP/validate.txt") of 36"
    # a small corpus in the same layout (the embedded KJV), then the same path at tiny sizes
    "$PY" -m asyncpp.data.corpus_build fixture --out "$CORPUS"
    "$PY" -m asyncpp.data.corpus_build verify "$CORPUS"
    WORKERS=${WORKERS:-2}
    EST=5
    SET=(--set run.device=cpu --set run.precision=fp32 --set run.compile=false
         --set run.threads=1 --set train.steps=4 --set train.batch_size=2
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
        # an $OUT inside the checkout is not code: keep it out of the committed-tree check
        out_abs=$(realpath "$OUT")
        if [ "${out_abs#"$PWD"/}" != "$out_abs" ] && [ -d .git/info ]; then
            echo "/${out_abs#"$PWD"/}/" >> .git/info/exclude
        fi
    fi
    if ! "$PY" -c "import pytorch_optimizer" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --target /tmp/asyncpp-site .whl/*.whl
        export PYTHONPATH="/tmp/asyncpp-site:$PYTHONPATH"
    fi
    if ! "$PY" -c "import pytorch_optimizer" 2>/dev/null; then
        # the claims read every grid's choice, SOAP's too: without SOAP nothing past opt-lr
        echo "error: pytorch-optimizer (SOAP) is missing: carry .whl/ (pip download" \
            "--no-deps -d .whl pytorch-optimizer==4.1.0)" >&2
        exit 2
    fi
    nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader || true
    "$PY" -m asyncpp.data.corpus_build verify "$CORPUS" --expect "$MANIFEST"
    "$PY" experiments/gpu/plan.py --corpus "$CORPUS"
    "$PY" experiments/gpu/plan.py --corpus "$CORPUS" --check
    if [ "${ALLOW_DIRTY:-0}" != 1 ]; then  # refused by every run later; say so now
        "$PY" -c "import sys; from asyncpp.study.ladder import provenance as p
try:
    p.require_clean(p.code_state(), False)
except p.DirtyTree as e:
    sys.exit(f'error: {e} (ALLOW_DIRTY=1)')"
    fi
    # the transfer rule: opt-180k's grids settled (else a clear error, before any training)
    "$PY" experiments/sweep.py --tier gpu --tables opt-lr --results "$RESULTS" --list \
        > /dev/null
    # K workers compile at once on 16 cores: 2 inductor compile threads each, not 16
    export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2}
    WORKERS=${WORKERS:-$("$PY" experiments/gpu/plan.py --corpus "$CORPUS" --get packed)}
    EST=$("$PY" experiments/gpu/plan.py --corpus "$CORPUS" --get first_run_s)
    # K workers on the machine's cores: each gets its share of threads. torch's default (all
    # cores in every worker) put 6 workers' 96 threads on 16 cores in the first call (load
    # average 68) and the 1.26M model's step took 0.22 s, not the planner's 25 ms
    SET=(--set "run.threads=$(( $(nproc) / WORKERS > 0 ? $(nproc) / WORKERS : 1 ))")
    read -ra EXTRA <<< "${RUNBOOK_SET:-}"  # extra sweep arguments (checking the path on a CPU)
    SET+=("${EXTRA[@]}")
fi

DEADLINE=$((START + BUDGET_S - 25))  # 25 s kept for the table at the end
HARD_STOP=$((START + BUDGET_S - 15))
mkdir -p "$LOGS" "$RESULTS"
echo "runbook: $WORKERS workers, deadline in $((DEADLINE - $(date +%s))) s, results in $RESULTS"
DIRTY=()
[ "${ALLOW_DIRTY:-0}" = 1 ] && DIRTY=(--allow-dirty)
pids=()
for i in $(seq 1 "$WORKERS"); do
    "$PY" experiments/gpu/worker.py --deadline "$DEADLINE" --run-estimate-s "$EST" -- \
        --results "$RESULTS" "${DIRTY[@]}" \
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

grep -h -E " (ok|diverged) val |^stop:|^worker: (deadline|opt-lr settled)|Error|error" \
    "$LOGS"/worker-*.log | sort || true
"$PY" experiments/gpu/plan.py --measured "$RESULTS" --since "$START" --workers "$WORKERS"
if [ -n "${KEEP:-}" ]; then  # before the report: its figure reads every tier's own folder
    cp "$RESULTS"/*-seed*.json "$KEEP/" 2>/dev/null || true
fi
"$PY" experiments/report.py --tier gpu --results "$RESULTS" --out "$REPORT" >/dev/null
sed -n '/^## Learning rates per/,/^## The gap against/p' "$REPORT/tables.md" | sed '$d'
n=$(find "$RESULTS" -maxdepth 1 -name "*-seed*.json" | wc -l)
echo "GPU runbook: $n results in $RESULTS, $failed worker(s) failed, $stopped stopped at the" \
    "hard stop, wall $(( $(date +%s) - START )) s"
if [ "$DRY" = 1 ]; then
    # every run of both tables done: the grids settled (an extension would plan a new run)
    "$PY" experiments/sweep.py --tier gpu --tables opt-lr,opt-claims --results "$RESULTS" \
        --list > "$TMP/list.txt"
    todo=$(grep -c '^todo' "$TMP/list.txt" || true)
    nlr=$(find "$RESULTS" -maxdepth 1 -name "lr-*-seed0.json" | wc -l)
    nclaims=$(grep -c -v '^done  lr-' "$TMP/list.txt" || true)
    echo "opt-lr: $nlr runs, $((nlr - 36)) of them past the first grids' edges"
    if [ "$todo" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$nlr" -le 36 ] || [ "$nclaims" -ne 36 ]; then
        echo "dry run FAILED: $todo runs left, $failed worker(s) failed, $nlr lr runs (want" \
            "> 36: an extension), $nclaims claims results (want 36)" >&2
        tail -n 30 "$LOGS"/worker-*.log >&2
        exit 1
    fi
    # resumable: the same command again finds every run done and trains nothing
    again=$("$PY" experiments/gpu/worker.py --deadline "$DEADLINE" --run-estimate-s "$EST" -- \
        --results "$RESULTS" "${DIRTY[@]}" "${SET[@]}" | tail -n 1)
    echo "second invocation: $again"
    echo "dry run ok: opt-lr settled in $nlr runs, opt-claims $nclaims runs, end to end"
fi
[ "$failed" -eq 0 ]
