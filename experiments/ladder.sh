#!/usr/bin/env bash
# One resumable lane of the compute-optimal ladder (experiments/tables_opt.py): the lr grids
# until every one is settled (a grid extends past an edge only after its points finish, so
# the sweep runs again until a pass trains nothing new), then the tables that read the chosen
# lrs. Stop it at any time (kill, Ctrl-C); the same command continues where it stopped. Two
# lanes may run at once (runs are claimed by lock files).
#
#   bash experiments/ladder.sh opt-180k [tables...] [-- sweep options]
#   e.g. nohup bash experiments/ladder.sh opt-180k > experiments/logs/opt-180k.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
tier="${1:?tier (opt-180k, opt-580k)}"; shift
tables=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do tables+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#tables[@]} -gt 0 ] || tables=(opt-lr opt-claims opt-more opt-tokens)
PY="${PYTHON:-.venv/bin/python}"
for t in "${tables[@]}"; do
  if [ "$t" = "opt-lr" ]; then
    while :; do
      out=$("$PY" experiments/sweep.py --tier "$tier" --tables opt-lr "$@" | tee /dev/stderr)
      echo "$out" | grep -q "sweep done: 0 runs" && break
    done
  else
    "$PY" experiments/sweep.py --tier "$tier" --tables "$t" "$@" || {
      echo "ladder: table $t of $tier could not run (see above)"; exit 1; }
  fi
done
