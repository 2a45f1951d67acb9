#!/usr/bin/env bash
# One resumable lane of the compute-optimal ladder (experiments/tables_opt.py): the lr grids
# and the tables that read the chosen lrs, pass after pass (a grid extends past an edge only
# after its points finish; a table lists a pair's cells once its lr has settled) until a pass
# trains nothing new. Stop it at any time (kill, Ctrl-C); the same command continues where
# it stopped. Two lanes may run at once (runs are claimed by lock files); sweep options such
# as `--optimizers muon,adamw` narrow a lane.
#
#   bash experiments/ladder.sh opt-180k [tables...] [-- sweep options]
#   e.g. nohup bash experiments/ladder.sh opt-180k > experiments/logs/opt-180k.log 2>&1 &
#
# `-- --deadline $(date -d '+150 min' +%s)` ends the lane before a run that would finish after
# that time (the upper quartile of the tier's wall times per step for that run's optimizer
# decides), so a session's end loses no half-done run.
#
# Results must name the code that made them, and sweep.py refuses a dirty tree: so the lane
# trains from a clean git worktree of the current commit (under $TMPDIR, with data/ linked in)
# and writes its results into this checkout's experiments/<tier>/results/. Commit first; edits
# made while a lane runs do not reach it (start a new lane to pick them up).
set -euo pipefail
cd "$(dirname "$0")/.."
tier="${1:?tier (opt-180k, opt-580k)}"; shift
tables=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do tables+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ -z "${LADDER_WORKTREE:-}" ]; then
  here=$PWD
  commit=$(git rev-parse HEAD)
  wt="${TMPDIR:-/tmp}/asyncpp-lane-${commit:0:12}"
  # Two lanes started together share one worktree: the second waits here until the first has
  # checked it out whole (`git worktree add` makes the folder before it fills it, so a bare
  # "folder exists" test let a lane run from a half-written tree).
  # (the lock lives in the repository's own git folder, so no file is left behind in $TMPDIR)
  exec 9> "$(git rev-parse --git-common-dir)/asyncpp-lane.lock"
  flock 9
  # A lane killed during `git worktree add` leaves a folder (even its .git file) that is not
  # whole: only a worktree whose checkout finished carries the mark, kept in its own git
  # folder (not in the tree, which must stay clean); any other is made again.
  ready() { [ -e "$wt/.git" ] && [ -e "$(git -C "$wt" rev-parse --git-dir 2>/dev/null)/asyncpp-lane-ready" ]; }
  if ! ready; then
    if [ -e "$wt" ]; then
      echo "ladder: $wt is not a whole checkout (a lane stopped while making it); making it again"
      git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
      git worktree prune
    fi
    git worktree add -q --detach "$wt" "$commit"
    touch "$(git -C "$wt" rev-parse --git-dir)/asyncpp-lane-ready"
  fi
  if [ -d data ] && [ ! -e "$wt/data" ]; then
    mkdir -p "$wt/data"
    for d in data/*; do ln -s "$here/$d" "$wt/data/"; done
  fi
  flock -u 9
  exec 9>&-
  export LADDER_WORKTREE=1 PYTHONPATH="$wt/src" PYTHON="${PYTHON:-$here/.venv/bin/python}"
  exec bash "$wt/experiments/ladder.sh" "$tier" "${tables[@]}" -- "$@" \
    --results "$here/experiments/$tier/results"
fi
PY="${PYTHON:-.venv/bin/python}"
# no tables named: the tier's own, in their order (asyncpp.study.ladder.tiers' table_order)
if [ ${#tables[@]} -eq 0 ]; then
  # a failure here must end the lane with its reason: a here-string of a failed substitution
  # would leave no tables, and the loop below would call the tier "settled"
  order=$("$PY" -c "from asyncpp.study.ladder.tiers import get_tier; \
print(' '.join(get_tier('$tier').table_order))") || {
    echo "ladder: cannot read the tables of $tier (see above)"; exit 1; }
  read -r -a tables <<< "$order"
  [ ${#tables[@]} -gt 0 ] || { echo "ladder: $tier names no tables"; exit 1; }
fi
# Passes over the tables until one trains nothing: a pass can make new cells appear (a grid
# extends past an edge, a settled lr lists its claims cells, a settled opt-180k grid starts
# its opt-580k grid). Each sweep trains one run, and after any run the pass starts again at
# the first table: the tables come in dependency order, so a grid's next point (which gates
# the cells after it) never waits behind hours of a later table's seeds. When nothing was
# trained here but another lane still runs a cell of these tables, wait for it: what it
# finishes may unlock more.
while :; do
  trained=0; busy=0
  for t in "${tables[@]}"; do
    # the copy for the log goes through fd 2 itself: `tee /dev/stderr` would reopen a log file
    # (nohup … > log 2>&1) and truncate it at every table
    out=$("$PY" experiments/sweep.py --tier "$tier" --tables "$t" --max-runs 1 "$@" \
      | tee >(cat >&2)) || { echo "ladder: table $t of $tier could not run (see above)"; exit 1; }
    echo "$out" | grep -q "running elsewhere" && busy=1
    if echo "$out" | grep -q "^stop: .* after the deadline"; then
      echo "ladder: $tier stopped at the deadline (the next run would end after it); the same" \
        "command continues"
      exit 0
    fi
    if echo "$out" | grep -q "sweep done: [1-9]"; then trained=1; break; fi
  done
  [ "$trained" = 1 ] && continue
  [ "$busy" = 1 ] && { sleep 60; continue; }
  break
done
echo "ladder: $tier settled (${tables[*]}): nothing left to train"
