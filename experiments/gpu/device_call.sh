#!/usr/bin/env bash
# One device call (copied to .gpu/go.sh by prepare_call.sh): unpack what was carried, run the
# gpu rung (run.sh, BUDGET_S 430 s by default), then the GPU benchmark on SmolLM-135M in the
# time left of CALL_S (585 s). Back under $OUT (at most 8 files there): go.log, rung.tgz
# (gpu/results, gpu/tables.md, logs; partial.tgz every 40 s until then), gpu_bench.json.
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
REAL=${OUT:?}
exec > >(tee -a "$REAL/go.log") 2>&1
# the device's .git is a copy taken earlier, without the branch: use the carried one
rm -rf .git && tar xf .gpu/git.tar
mkdir -p data/debdocs .whl
cp .gpu/debdocs/*.json .gpu/debdocs/*.bin data/debdocs/
cp .gpu/whl/*.whl .whl/
python3 - <<'PY'
import lzma, pathlib, shutil
for f in sorted(pathlib.Path(".gpu/debdocs").glob("*.xz")):
    with lzma.open(f) as src, open(pathlib.Path("data/debdocs") / f.stem, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 22)
PY
echo "HEAD $(git rev-parse HEAD); uncommitted: $(git status --porcelain | wc -l)"
mkdir -p /tmp/gout
(while sleep 40; do tar -C /tmp/gout -czf "$REAL/partial.tgz" . 2>/dev/null; done) & tarloop=$!
OUT=/tmp/gout BUDGET_S=${BUDGET_S:-430} bash experiments/gpu/run.sh
echo "run.sh rc=$?"
kill $tarloop 2>/dev/null
tar -C /tmp/gout -czf "$REAL/rung.tgz" . && rm -f "$REAL/partial.tgz"
left=$(( ${CALL_S:-585} - ($(date +%s) - T0) ))
echo "benchmark: $left s left"
export PYTHONPATH=/tmp/asyncpp-site:$PWD/src
[ "$left" -gt 40 ] && PYTHONUNBUFFERED=1 timeout "$left" python3 benchmarks/gpu/run_gpu.py \
    --models smollm-135m --out "$REAL/gpu_bench.json"
echo "device call done in $(( $(date +%s) - T0 )) s"
