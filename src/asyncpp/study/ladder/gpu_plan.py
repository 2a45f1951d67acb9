r"""Planner of the GPU tier: the largest protocol that fits one device call.

Inputs: the corpus (its ``manifest.json``: unique training tokens :math:`C`, validation tokens,
vocabulary :math:`V`), the measured speed of the H200 (:data:`MEASURED`), the assumptions of
the speed model (:data:`ASSUMED`, each named in experiments/README.md, "GPU protocol") and the
time budget. Output: the shape, run length, batch, the ladder's run count and the number of
runs packed on the GPU at once, with the arithmetic — and ``--write-config`` writes them as
``experiments/configs/gpu.toml``.

Rules, in order:

1. **No run sees a token twice**: tokens per run :math:`D_\text{run} = S B T \le C` (S steps,
   B sequences of T tokens; the sampler draws windows without replacement within an epoch).
2. **Tokens per parameter as close to 20 as the corpus allows**: from a ladder of LLaMA shapes
   (head size 32, SwiGLU width :math:`\lceil 2.75 D\rceil_{32}`, tied embeddings; parameters
   :math:`N` counted as the paper counts them, embeddings included), the largest :math:`N`
   with :math:`20 N \le C` whose runs fit the budget; then :math:`D_\text{run} \approx 20 N`
   (S = 500 steps, as the CPU tiers; T = 512). A corpus too small for any shape gets the
   smallest one and one epoch.
3. **The ladder's tables** (experiments/tables_opt.py), as on every larger tier: for each of
   the :math:`Q` = 12 (optimizer, mode) pairs (Muon, AdamW, SOAP × sync / 2BW / 2BW + EF /
   2BW + EF(γ*)), ``opt-lr`` trains seed 0 on a 3-point grid around opt-180k's choice (the
   transfer rule), then one more point per pass while its best point sits on an edge (at most
   :math:`E` = tables_opt.MAX_EXTEND passes), then ``opt-claims`` trains seeds 1 and 2 at the
   chosen lr (seed 0 is the lr run, reused):

   .. math::
       R_\min = 3Q + 2Q = 60,\qquad R_\max = 3Q + EQ + 2Q = 96\ \text{runs}.

   A pass starts only when the one before has finished (a grid extends once its points are
   in), so the passes are counted apart: :math:`w = \lceil 3Q/K\rceil + e\lceil Q/K\rceil +
   \lceil 2Q/K\rceil` waves with :math:`e \in [0, E]` extension passes. :math:`K`, the number
   of runs packed at once, minimises the worst case (:math:`e = E`); the shape is the largest
   whose protocol without extensions (:math:`e = 0`) fits the budget, and the plan says
   whether the worst case does too. When the time runs out (a worst case over the budget, or
   a speed model that is wrong), what is done first: every pair's grid centre (Muon and AdamW
   first), then the grids' other points, their extensions, and the claims' seeds 1, then 2.

Speed model (one H200, bf16, ``run.compile = true``, no per-step host sync):

.. math::
    F = 6N + 12 L D T \ \text{FLOP/token (the trainer's MFU numerator)},\qquad
    t_\text{gpu} = \frac{F\,B T}{P\,m(D)},\qquad m(D) = m_{576}\,(D/576)^{\alpha},

with :math:`P` = 989 TFLOP/s and :math:`m(D)` the MFU fitted through the two measured shapes
(135M: :math:`D = 576`, 30.6 %; 360M: :math:`D = 960`, 38.4 %; :math:`\alpha = 0.445`). A step
also costs host time :math:`t_\text{host}` (Python, kernel launches; assumed). One process runs
a step in :math:`\max(t_\text{gpu}, t_\text{host})` (launches are asynchronous). :math:`K`
processes time-share the GPU: while one is on the host another's kernels run, so

.. math::
    r_K = B T \min\!\Big(\frac{K}{t_\text{host}},\ \frac{1}{t_\text{gpu}(1 + s)}\Big)

tokens/s in all (:math:`s`: context-switch loss, assumed), and :math:`K` workers (one process
each, runs in process one after another, so a worker compiles once) need

.. math::
    T = o_1 + w\,\frac{K D_\text{run}(1+\epsilon)}{r_K} + (w-1)\,o_2

seconds for :math:`w` waves (:math:`o_1`: a worker's first start-up and compile, :math:`o_2`:
each later run's set-up, :math:`\epsilon`: evaluation cost relative to training).

Usage::

    python experiments/gpu/plan.py --corpus data/debdocs            # print the plan
    python experiments/gpu/plan.py --corpus data/debdocs --write-config
    python experiments/gpu/plan.py --check --corpus data/debdocs     # gpu.toml fits this corpus
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from asyncpp.data.corpus_build import corpus_id
from asyncpp.models.config import ModelConfig
from asyncpp.train.config import from_dict, read_toml

from .paths import CONFIGS, EXPERIMENTS, REPO

HERE = EXPERIMENTS / "gpu"
CONFIG = CONFIGS / "gpu.toml"

PEAK_TFLOPS = 989.0
# Measured on one H200 (benchmarks/gpu/run_gpu.py, bf16, compile on, bare training loop).
MEASURED = {"smollm-135m": {"dim": 576, "params": 134.5e6, "tokens_per_s": 245e3, "mfu": 0.306,
                            "compile_s": 55.0},
            "smollm-360m": {"dim": 960, "params": 361.8e6, "tokens_per_s": 130e3, "mfu": 0.384}}
# Assumptions (not measurable on a CPU; the runbook records what replaces each of them).
ASSUMED = {
    "host_ms": 25.0,        # host time per step of one process (Python, launches, optimizer)
    "switch_loss": 0.15,    # time-slicing loss when K > 1 processes share the GPU
    "first_run_s": 60.0,    # a worker's first run: torch import, CUDA, data, cold compile
                            # (train + eval graphs) while K workers compile at once
    "next_run_s": 8.0,      # each later run in the same worker (in process): model, optimizer,
                            # data; the compiled graphs are reused (or read from inductor's
                            # on-disk cache)
    "eval_frac": 0.05,      # evaluation passes, as a fraction of the training time
    "max_packed": 8,        # processes at once (16 CPU cores: 2 each)
}
BUDGET_S = 480.0  # of the 540 s (9 min) the runbook may use: 60 s for checks and the report
OPTIMIZERS = ("muon", "adamw", "soap")
MODES = ("sync", "async", "ef", "efg")
PAIRS = len(OPTIMIZERS) * len(MODES)  # the (optimizer, mode) pairs of opt-lr and opt-claims
GRID_POINTS = 3  # the transfer rule's first grid (tables_opt.lr_grid)
MAX_EXTEND = 3  # tables_opt.MAX_EXTEND (a test checks they agree)
SEEDS = 3  # opt-claims' seeds; seed 0 is the lr run
SEQ_LEN = 512
STEPS = 500
TOKENS_PER_PARAM = 20.0
LADDER_DIMS = (64, 96, 128, 192, 256, 384)
LADDER_LAYERS = (2, 4, 6, 8)


def _mfu(dim: int) -> float:
    a, b = MEASURED["smollm-135m"], MEASURED["smollm-360m"]
    alpha = math.log(b["mfu"] / a["mfu"]) / math.log(b["dim"] / a["dim"])
    return a["mfu"] * (dim / a["dim"]) ** alpha


def ladder(vocab: int) -> list[dict]:
    """Candidate shapes: (D, L) with head size 32, GQA (kv heads = the largest proper divisor
    of the heads, at least 1), SwiGLU width ceil(2.75 D) rounded up to 32, tied embeddings."""
    out = []
    for d in LADDER_DIMS:
        for n_layers in LADDER_LAYERS:
            heads = d // 32
            kv = max([k for k in range(1, heads) if heads % k == 0] or [1])
            ffn = -(-int(2.75 * d) // 32) * 32
            mc = ModelConfig(name="gpu", vocab_size=vocab, dim=d, n_layers=n_layers,
                             n_heads=heads, n_kv_heads=kv, ffn_dim=ffn, max_seq_len=SEQ_LEN)
            out.append({"dim": d, "n_layers": n_layers, "n_heads": heads, "n_kv_heads": kv,
                        "ffn_dim": ffn, "params": mc.num_params(),
                        "embedding": vocab * d})
    return sorted(out, key=lambda s: s["params"])


@dataclass
class Plan:
    shape: dict
    steps: int
    batch: int
    seq_len: int
    tokens_per_run: int
    seeds: int
    runs: int  # without extensions
    runs_max: int  # every grid extended MAX_EXTEND times
    packed: int
    waves: int
    waves_max: int
    run_s: float
    total_s: float
    total_max_s: float
    rate_one: float
    rate_packed: float
    corpus_train: int
    corpus_val: int
    vocab: int
    eval_batches: int
    budget_s: float

    @property
    def tokens_per_param(self) -> float:
        return self.tokens_per_run / self.shape["params"]


def speed(shape: dict, batch: int, seq_len: int, k: int, a: dict) -> tuple[float, float, float]:
    """(t_gpu per step, t_host per step, aggregate tokens/s of k packed processes)."""
    flops = 6.0 * shape["params"] + 12.0 * shape["n_layers"] * shape["dim"] * seq_len
    t_gpu = flops * batch * seq_len / (PEAK_TFLOPS * 1e12 * _mfu(shape["dim"]))
    t_host = a["host_ms"] / 1e3
    loss = a["switch_loss"] if k > 1 else 0.0
    rate = batch * seq_len * min(k / t_host, 1.0 / (t_gpu * (1 + loss)))
    return t_gpu, t_host, rate


def make_plan(corpus_train: int, corpus_val: int, vocab: int, budget_s: float = BUDGET_S,
              a: dict | None = None, steps: int = STEPS, seq_len: int = SEQ_LEN) -> Plan:
    """The largest protocol that fits (rules in the module docstring)."""
    a = {**ASSUMED, **(a or {})}
    windows = (corpus_train - 1) // seq_len  # no run sees a token twice
    best = None
    shapes = ladder(vocab)
    # the shapes the corpus feeds at 20 tokens/parameter; if none, the smallest (fewer tokens)
    shapes = [s for s in shapes if TOKENS_PER_PARAM * s["params"] <= corpus_train] or shapes[:1]
    first, claims = GRID_POINTS * PAIRS, (SEEDS - 1) * PAIRS
    for shape in shapes:
        target = TOKENS_PER_PARAM * shape["params"]
        batch = min(int(target // (steps * seq_len)), windows // steps)
        batch -= batch % 2  # two microbatches
        if batch < 2:
            continue
        fits = []
        for k in range(1, int(a["max_packed"]) + 1):
            _, _, rate = speed(shape, batch, seq_len, k, a)
            run_s = k * steps * batch * seq_len * (1 + a["eval_frac"]) / rate
            w_min = math.ceil(first / k) + math.ceil(claims / k)
            w_max = w_min + MAX_EXTEND * math.ceil(PAIRS / k)
            t_min, t_max = (a["first_run_s"] + w * run_s + (w - 1) * a["next_run_s"]
                            for w in (w_min, w_max))
            fits.append((t_max, t_min, k, w_min, w_max, run_s, rate))
        t_max, t_min, k, w_min, w_max, run_s, rate = min(fits)
        if t_min <= budget_s:
            _, _, r1 = speed(shape, batch, seq_len, 1, a)
            val_windows = (corpus_val - 1) // seq_len
            plan = Plan(shape, steps, batch, seq_len, steps * batch * seq_len, SEEDS,
                        first + claims, first + MAX_EXTEND * PAIRS + claims, k, w_min, w_max,
                        run_s, t_min, t_max, r1, rate, corpus_train, corpus_val, vocab,
                        max(1, min(8, val_windows // batch)), budget_s)
            if best is None or plan.shape["params"] > best.shape["params"]:
                best = plan
    if best is None:
        raise ValueError(f"no protocol fits {budget_s:.0f} s with {corpus_train:,} training "
                         "tokens; raise the budget or use a larger corpus")
    return best


def describe(p: Plan, a: dict | None = None) -> str:
    """The plan and its arithmetic, as printed (and quoted in experiments/README.md)."""
    a = {**ASSUMED, **(a or {})}
    s = p.shape
    t_gpu, t_host, _ = speed(s, p.batch, p.seq_len, p.packed, a)
    flops = 6.0 * s["params"] + 12.0 * s["n_layers"] * s["dim"] * p.seq_len
    emb = 100 * s["embedding"] / s["params"]
    mfu = 100 * _mfu(s["dim"])
    return "\n".join([
        f"corpus: {p.corpus_train:,} unique training tokens, {p.corpus_val:,} validation, "
        f"vocabulary {p.vocab}",
        f"shape: D={s['dim']} L={s['n_layers']} heads={s['n_heads']}/{s['n_kv_heads']} "
        f"ffn={s['ffn_dim']}: N = {s['params']:,} parameters ({emb:.0f} % embedding)",
        f"run: {p.steps} steps x {p.batch} x {p.seq_len} = {p.tokens_per_run:,} tokens = "
        f"{p.tokens_per_run / p.corpus_train:.2f} epoch (no token twice), "
        f"{p.tokens_per_param:.1f} tokens/parameter",
        f"cells: {len(OPTIMIZERS)} optimizers x {len(MODES)} modes = {PAIRS} pairs; opt-lr "
        f"{GRID_POINTS * PAIRS} runs (seed 0, {GRID_POINTS}-point grids around opt-180k's lr*) "
        f"+ up to {MAX_EXTEND} x {PAIRS} past an edge; opt-claims {(p.seeds - 1) * PAIRS} "
        f"(seeds 1-{p.seeds - 1}; seed 0 is the lr run) = {p.runs} to {p.runs_max} runs, "
        f"{p.runs * p.tokens_per_run / 1e9:.2f}B to {p.runs_max * p.tokens_per_run / 1e9:.2f}B "
        "tokens",
        f"speed: F = {flops / 1e6:.1f} MFLOP/token; MFU m(D={s['dim']}) = {mfu:.1f} %"
        f" -> t_gpu = {1e3 * t_gpu:.1f} ms/step; t_host = {1e3 * t_host:.0f} ms/step (assumed)",
        f"one process: {p.rate_one / 1e6:.2f}M tokens/s; {p.packed} packed: "
        f"{p.rate_packed / 1e6:.2f}M tokens/s in all (x{p.rate_packed / p.rate_one:.1f})",
        f"time: {a['first_run_s']:.0f} s first start-up and compile + {p.waves} to "
        f"{p.waves_max} waves x {p.run_s:.0f} s training + {p.waves - 1} to {p.waves_max - 1} "
        f"x {a['next_run_s']:.0f} s set-up = {p.total_s:.0f} to {p.total_max_s:.0f} s of the "
        f"{p.budget_s:.0f} s budget ("
        + ("the worst case fits" if p.total_max_s <= p.budget_s else
           f"the worst case is {p.total_max_s - p.budget_s:.0f} s over") + ")",
        "order if time runs out: every pair's grid centre (Muon and AdamW first), the grids' "
        "other points, their extensions, then the claims' seed 1, then seed 2",
    ])


def read_manifest(corpus: Path) -> dict:
    mf = Path(corpus) / "manifest.json"
    if not mf.is_file():
        raise ValueError(f"{mf} is missing; build the corpus: asyncpp-corpus build --out {corpus}")
    return json.loads(mf.read_text())


def config_text(p: Plan, manifest: dict) -> str:
    s = p.shape
    arith = "\n".join("# " + line for line in describe(p).splitlines())
    return f"""# The GPU tier (experiments/README.md, "GPU protocol"), written by
# `python experiments/gpu/plan.py --corpus data/debdocs --write-config`. Planned with:
{arith}
# Corpus: {corpus_id(manifest)} (asyncpp-corpus build --out data/debdocs); the runbook passes
# data.path / data.val_path / data.tokenizer of the folder it uses.
[model]
name = "small"
vocab_size = {p.vocab}
dim = {s['dim']}
n_layers = {s['n_layers']}
n_heads = {s['n_heads']}
n_kv_heads = {s['n_kv_heads']}
ffn_dim = {s['ffn_dim']}
max_seq_len = {p.seq_len}

[data]
source = "shards"
path = "data/debdocs/debdocs_train_*.bin"
val_path = "data/debdocs/debdocs_val_*.bin"
tokenizer = "data/debdocs/tokenizer.json"
seq_len = {p.seq_len}

[train]
steps = {p.steps}
batch_size = {p.batch}
warmup_frac = 0.1
min_lr_ratio = 0.1
grad_clip = 1.0
eval_every = {p.steps // 5}
eval_batches = {p.eval_batches}
log_every = 10

[optimizer]
weight_decay = 0.1
adamw_weight_decay = 0.1

[pipeline]
stages = 2
microbatches = 2

[run]
device = "cuda"
precision = "bf16"
compile = true

[log]
progress = false
plot = false
tensorboard = "off"
"""


def check_config(manifest: dict, config: Path = CONFIG) -> str:
    """That ``config`` never repeats a token of this corpus and matches its vocabulary;
    returns a one-line summary, raises ``ValueError`` otherwise."""
    cfg = from_dict(read_toml(config))
    t = manifest["totals"]
    windows = sum((s["tokens"] - 1) // cfg.data.seq_len for s in manifest["shards"]
                  if s["split"] == "train")  # TokenWindows: per shard, no window across two
    need = cfg.train.steps * cfg.train.batch_size
    if need > windows:
        raise ValueError(f"{config.name}: a run draws {need:,} windows of {cfg.data.seq_len} "
                         f"tokens but the corpus has {windows:,}: it would repeat data")
    if manifest["tokenizer"]["vocab_size"] > cfg.model_config().vocab_size:
        raise ValueError(f"{config.name}: model.vocab_size {cfg.model_config().vocab_size} < "
                         f"the corpus vocabulary {manifest['tokenizer']['vocab_size']}")
    n = cfg.model_config().num_params()
    tok = need * cfg.data.seq_len
    return (f"ok {config.name}: {n:,} parameters, {tok:,} tokens per run = "
            f"{tok / t['train_tokens']:.2f} epoch, {tok / n:.1f} tokens/parameter")


def measured(results: Path, since: float, workers: int) -> str:
    """What the runs finished in ``results`` after ``since`` measured, beside the speed
    model's assumptions: aggregate tokens/s, per-run steady tokens/s, first step (compile)."""
    recs = []
    for f in sorted(Path(results).glob("*-seed*.json")):
        try:
            r = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        try:
            done = calendar.timegm(time.strptime(r.get("finished_utc", ""), "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            continue
        if r.get("status") == "ok" and "reused_from" not in r and done >= since:
            recs.append(r)
    if not recs:
        return "measured: no run finished in this invocation"
    fin = [r["final"] for r in recs]
    tokens = sum(x.get("tokens", 0) for x in fin)
    wall = time.time() - since
    med = lambda k: statistics.median([x[k] for x in fin if x.get(k) is not None] or [0.0])  # noqa: E731
    return "\n".join([
        f"measured: {len(recs)} runs, {tokens:,} tokens in {wall:.0f} s = "
        f"{tokens / wall / 1e6:.2f}M tokens/s in all ({workers} workers, start-up included)",
        f"per run (median): steady {med('steady_tokens_per_s') / 1e6:.2f}M tokens/s "
        f"(x{workers} = {workers * med('steady_tokens_per_s') / 1e6:.2f}M), first step "
        f"{med('first_step_s'):.1f} s (compile), wall {med('wall_s'):.1f} s, MFU "
        f"{100 * med('mfu'):.1f} %",
        f"assumed: first run {ASSUMED['first_run_s']:.0f} s, later runs "
        f"{ASSUMED['next_run_s']:.0f} s set-up, host {ASSUMED['host_ms']:.0f} ms/step",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=str(REPO / "data" / "debdocs"),
                    help="the corpus folder (its manifest.json)")
    ap.add_argument("--manifest", default=None,
                    help="a corpus manifest.json instead of --corpus (e.g. the committed "
                    "experiments/gpu/corpus-manifest.json)")
    ap.add_argument("--get", default=None, metavar="FIELD",
                    help="print one field of the plan (packed, seeds, run_s, ...) or an "
                    "assumption (first_run_s, ...)")
    ap.add_argument("--measured", default=None, metavar="RESULTS",
                    help="summarise the speed measured by the runs in RESULTS (with --since)")
    ap.add_argument("--since", type=float, default=0.0, help="Unix time the runbook started")
    ap.add_argument("--workers", type=int, default=0, help="workers the runbook started")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S)
    ap.add_argument("--assume", action="append", default=[], metavar="KEY=VALUE",
                    help="override an assumption: " + ", ".join(ASSUMED))
    ap.add_argument("--write-config", action="store_true", help=f"write {CONFIG.name}")
    ap.add_argument("--check", action="store_true",
                    help=f"check that {CONFIG.name} fits the corpus (no repeated token)")
    args = ap.parse_args(argv)
    if args.measured:
        print(measured(Path(args.measured), args.since, args.workers))
        return 0
    try:
        manifest = (json.loads(Path(args.manifest).read_text()) if args.manifest
                    else read_manifest(Path(args.corpus)))
        if args.check:
            print(check_config(manifest))
            return 0
        a = {k: float(v) for k, v in (kv.split("=", 1) for kv in args.assume)}
        t = manifest["totals"]
        p = make_plan(t["train_tokens"], t["val_tokens"], manifest["tokenizer"]["vocab_size"],
                      args.budget_s, a)
    except ValueError as e:
        print(f"plan.py: {e}", file=sys.stderr)
        return 2
    if args.get:
        a_all = {**ASSUMED, **a}
        print(a_all[args.get] if args.get in a_all else getattr(p, args.get))
        return 0
    print(describe(p, a))
    if args.write_config:
        CONFIG.write_text(config_text(p, manifest))
        print(f"wrote {CONFIG}")
    return 0

