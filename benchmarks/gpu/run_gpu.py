"""Benchmark 6 — one prepared GPU run (one H200, < 8 minutes), JSON results.

    python benchmarks/gpu/run_gpu.py                 # on the GPU machine
    python benchmarks/gpu/run_gpu.py --dry-run       # anywhere: tiny sizes, 1 iteration, CPU ok

Sections (each one isolated: a failure is recorded in the JSON and the run goes on):

1. ``matmul``: bf16 matmul peak, measured with one large square matmul (2n³ flops).
2. ``newton_schulz``: asyncpp's batched Newton–Schulz (bf16, 5 steps) over the SmolLM-135M
   hidden matrices stacked by shape; flops per step of an n×k matrix (n ≤ k) are
   4n²k + 2n³ (X Xᵀ, A·A, B·X); TFLOP/s and the fraction of the matmul peak.
3. ``muon``: ``asyncpp.optim.Muon`` (bf16) vs ``torch.optim.Muon`` step time on the 210
   matrices (target ≥ 3× faster on a GPU: equal shapes batched instead of ~3,000 small kernels).
4. ``backend``: the backend ``asyncpp.pipeline.init_distributed`` picks (NCCL expected on CUDA),
   checked with a 1-rank process group and one all-reduce.
5. ``train``: tokens/s and MFU of smollm-135m and smollm-360m (forward + backward + Muon step,
   bf16 autocast, ``torch.compile`` of the model *and the loss*); model flops per token
   6N + 12·L·d·T (attention scores), MFU against both the H200's dense bf16 spec
   (989 TFLOP/s) and the measured matmul peak.
6. ``train_cli``: ``asyncpp-train``'s loop in process on the first model's shape, and its steady
   tokens/s ÷ the bare loop's, twice: ``train_cli_plain`` the same math as the bare loop (no
   pipeline, no correction, no clipping: the loop's own cost, target ≥ 0.95) and
   ``train_cli`` 2BW simulated with Muon + EF and global clipping (what the delay's exact
   simulation adds: two half-batch passes, two weight versions, the EF step, the norm).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import socket
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

import torch

H200_BF16_DENSE_TFLOPS = 989.0


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev: torch.device, warmup: int, iters: int) -> list[float]:
    """Wall seconds of ``iters`` calls of ``fn`` after ``warmup`` untimed calls (synchronised)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        out.append(time.perf_counter() - t0)
    return out


def med(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def smollm_135m_shapes(layers: int = 30, div: int = 1) -> list[tuple[int, int]]:
    """SmolLM-135M's 7 hidden matrices per layer (sides divided by ``div`` in a dry run)."""
    h, kv, ff = 576 // div, 192 // div, 1536 // div
    return [(h, h), (kv, h), (kv, h), (h, h), (ff, h), (ff, h), (h, ff)] * layers


def bench_matmul(dev, a) -> dict:
    n = a.matmul_n
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    ts = timed(lambda: x @ y, dev, a.warmup, a.iters)
    tflops = 2 * n**3 / med(ts) / 1e12
    return {"n": n, "median_s": med(ts), "tflops": tflops}


def ns_flops(shape: tuple[int, int], steps: int = 5) -> float:
    n, k = min(shape), max(shape)
    return steps * (4 * n * n * k + 2 * n**3)


def bench_ns(dev, a, peak: float | None) -> dict:
    from asyncpp.optim import newton_schulz

    by_shape: dict[tuple, int] = {}
    for s in smollm_135m_shapes(a.layers, a.div):
        by_shape[s] = by_shape.get(s, 0) + 1
    stacks = [torch.randn(c, *s, device=dev) for s, c in by_shape.items()]
    flops = sum(c * ns_flops(s) for s, c in by_shape.items())
    ts = timed(lambda: [newton_schulz(g, dtype=torch.bfloat16) for g in stacks], dev,
               a.warmup, a.iters)
    tflops = flops / med(ts) / 1e12
    big = torch.randn(8, a.matmul_n // 2, a.matmul_n // 2, device=dev)
    tb = timed(lambda: newton_schulz(big, dtype=torch.bfloat16), dev, a.warmup, a.iters)
    big_tflops = 8 * ns_flops(tuple(big.shape[1:])) / med(tb) / 1e12
    out = {"smollm_135m_stacks": {str(s): c for s, c in by_shape.items()},
           "median_s": med(ts), "tflops": tflops,
           "large_square": {"shape": list(big.shape), "median_s": med(tb), "tflops": big_tflops}}
    if peak:
        out["fraction_of_matmul_peak"] = tflops / peak
        out["large_square"]["fraction_of_matmul_peak"] = big_tflops / peak
    return out


def bench_muon(dev, a) -> dict:
    from asyncpp.optim import Muon

    torch.manual_seed(0)
    shapes = smollm_135m_shapes(a.layers, a.div)
    ours = [torch.nn.Parameter(0.02 * torch.randn(s, device=dev)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    for p, q in zip(ours, theirs):
        p.grad = torch.randn_like(p)
        q.grad = p.grad.clone()
    o1 = Muon(ours, lr=1e-3, weight_decay=0.0, ns_dtype="bfloat16")
    o2 = torch.optim.Muon(theirs, lr=1e-3, weight_decay=0.0)
    t_ours, t_torch = [], []
    for _ in range(a.warmup):
        o1.step()
        o2.step()
    for _ in range(a.iters):   # interleaved
        t_torch += timed(o2.step, dev, 0, 1)
        t_ours += timed(o1.step, dev, 0, 1)
    ratio = med(t_torch) / med(t_ours)
    return {"matrices": len(shapes), "torch_median_s": med(t_torch),
            "asyncpp_median_s": med(t_ours), "speedup": ratio, "target": 3.0,
            "met": ratio >= 3.0}


def bench_backend(dev) -> dict:
    import torch.distributed as dist

    from asyncpp.pipeline import init_distributed

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        got = init_distributed(dev, timeout=60)
        backend = dist.get_backend()
        x = torch.ones(4, device=got)
        dist.all_reduce(x)
        _sync(got)
        ok = bool((x == 1).all())
        dist.destroy_process_group()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    expected = "nccl" if dev.type == "cuda" else "gloo"
    return {"device": str(got), "backend": backend, "expected": expected,
            "all_reduce_ok": ok, "met": backend == expected and ok}


def bench_train(dev, a, model_name: str, peak: float | None) -> dict:
    from asyncpp.models import build_model
    from asyncpp.optim import build_optimizer
    from asyncpp.train.loop import lm_loss

    torch.manual_seed(0)
    model = build_model(model_name, device=dev, seed=0)
    mc = model.config
    n_params = model.num_params()
    opt = build_optimizer("muon", list(model.named_parameters()), lr=0.02, adamw_lr=0.006,
                          ns_dtype="bfloat16" if dev.type == "cuda" else "float32")
    B, T = a.batch, a.seq_len
    x = torch.randint(0, mc.vocab_size, (B, T), device=dev)
    y = torch.randint(0, mc.vocab_size, (B, T), device=dev)

    def loss_of(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            return lm_loss(model(x), y)

    # The loss inside the compiled graph (one graph from tokens to the scalar loss).
    loss_fn = torch.compile(loss_of) if a.compile else loss_of

    def step():
        loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    step()                      # compile + first step
    _sync(dev)
    first = time.perf_counter() - t0
    ts = timed(step, dev, max(0, a.warmup - 1), a.iters)
    tok_s = B * T / med(ts)
    flops_per_token = 6 * n_params + 12 * mc.n_layers * mc.dim * T
    achieved = flops_per_token * tok_s / 1e12
    out = {"model": model_name, "params": n_params, "batch": B, "seq_len": T,
           "compile": a.compile, "first_step_s": first, "median_step_s": med(ts),
           "tokens_per_s": tok_s, "model_tflops": achieved,
           "mfu_vs_h200_spec": achieved / H200_BF16_DENSE_TFLOPS}
    if peak:
        out["mfu_vs_measured_matmul_peak"] = achieved / peak
    if dev.type == "cuda":
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
    return out


# asyncpp-train options of the two loops measured against the bare one
CLI_VARIANTS = {
    "2bw": {"delay": {"correction": "ef"},
            "pipeline": {"schedule": "2bw", "stages": 2, "microbatches": 2, "simulate": True}},
    "plain": {"delay": {"correction": "none"}, "pipeline": {"schedule": "none"},
              "train": {"grad_clip": 0.0}},
}


def bench_train_cli(dev, a, model_name: str, bare: dict | None, variant: str = "2bw") -> dict:
    """``asyncpp-train``'s own loop in this process — ``variant`` "2bw": PipeDream-2BW
    simulated (P = 2, m = 2), Muon + EF, global clipping; "plain": no pipeline, correction or
    clipping, the bare loop's math — bf16, compile, metrics every 10 steps, on the shape of
    ``bench_train``'s bare loop (random tokens from a shard file, so no tokenizer is trained),
    and the ratio of its ``steady_tokens_per_s`` to the bare loop's tokens/s."""
    import tempfile

    import numpy as np

    from asyncpp.models import get_model_config
    from asyncpp.train.config import from_dict, validate
    from asyncpp.train.run import train

    mc = get_model_config(model_name)
    B, T = a.batch, a.seq_len
    steps = max(a.warmup, 2) + max(a.iters, 2) * 2
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, mc.vocab_size, size=(steps + 4) * B * (T + 1) + 1)
        (Path(tmp) / "train.bin").write_bytes(tokens.astype(np.uint32).tobytes())
        extra = CLI_VARIANTS[variant]
        cfg = from_dict({
            "run": {"name": "train_cli", "dir": str(Path(tmp) / "run"), "device": str(dev),
                    "precision": "bf16" if dev.type == "cuda" else "fp32",
                    "compile": bool(a.compile)},
            "model": {"name": model_name},
            "data": {"source": "shards", "path": str(Path(tmp) / "train.bin"),
                     "shard_dtype": "uint32", "seq_len": T, "val_fraction": 0.0},
            "train": {"steps": steps, "batch_size": B, "eval_every": 0, "log_every": 10,
                      **extra.get("train", {})},
            "optimizer": {"name": "muon", "lr": 0.02, "adamw_lr": 0.006},
            "delay": extra["delay"], "pipeline": extra["pipeline"],
            "log": {"progress": False, "tensorboard": "off", "plot": False}})
        validate(cfg)
        res = train(cfg)
        out = {"model": model_name, "variant": variant, "steps": steps, "batch": B,
               "seq_len": T,
               "compile": bool(a.compile), "steady_tokens_per_s": res.steady_tokens_per_s,
               "tokens_per_s_wall": res.tokens_per_s, "first_step_s": res.first_step_s,
               "mfu": res.mfu}
    if bare and bare.get("tokens_per_s") and res.steady_tokens_per_s:
        out["ratio_vs_bare_loop"] = res.steady_tokens_per_s / bare["tokens_per_s"]
    return out


def render(r: dict, name: str) -> str:
    """The README block of one GPU run's JSON (``name``: its file, for the reader)."""
    m, sec = r["machine"], r["sections"]
    lines = [f"`results/{name}`: {m['device']}, {m['date']}, torch {m['torch']}.", ""]
    if "matmul" in sec:
        lines.append(f"- bf16 matmul peak {sec['matmul']['tflops']:.1f} TFLOP/s (n = "
                     f"{sec['matmul']['n']}); Newton–Schulz over SmolLM-135M's matrices "
                     f"{sec.get('newton_schulz', {}).get('fraction_of_matmul_peak', 0):.3f} "
                     "of it.")
    if "muon" in sec:
        mu = sec["muon"]
        lines.append(f"- `asyncpp.optim.Muon` {mu['speedup']:.2f}× faster than "
                     f"`torch.optim.Muon` on {mu['matrices']} matrices (target "
                     f"{mu['target']:g}×: {'met' if mu['met'] else 'not met'}).")
    if "backend" in sec:
        lines.append(f"- backend {sec['backend']['backend']} (expected "
                     f"{sec['backend']['expected']}).")
    for k, v in sec.items():
        if k.startswith("train_") and not k.startswith("train_cli"):
            lines.append(f"- {v['model']}: {v['tokens_per_s']:,.0f} tokens/s, MFU "
                         f"{v['mfu_vs_h200_spec']:.1%} of the 989 TFLOP/s spec, first step "
                         f"{v['first_step_s']:.1f} s, peak {v.get('peak_memory_gib', 0):.1f} GiB.")
        elif k.startswith("train_cli"):
            what = ("the same math (no pipeline, correction or clipping)"
                    if v.get("variant") == "plain" else "2BW simulated, Muon + EF, clipping")
            lines.append(f"- `asyncpp-train`'s loop, {what}: {v['steady_tokens_per_s']:,.0f} "
                         f"steady tokens/s = **{v.get('ratio_vs_bare_loop', 0):.2f}** of the "
                         "bare loop (target 0.95).")
    if r.get("errors"):
        lines.append(f"- sections that failed: {', '.join(sorted(r['errors']))}.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny sizes, 1 iteration, no compile: checks the script on any machine")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/)")
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--render", metavar="JSON", default=None,
                    help="write benchmarks/README.md's block of a recorded run and exit")
    args = ap.parse_args(argv)
    if args.render:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from bench_common import write_readme_block
        path = Path(args.render)
        text = render(json.loads(path.read_text()), path.name)
        print(text)
        write_readme_block("gpu", text)
        return {"rendered": str(path), "errors": {}}
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.dry_run:
        a = argparse.Namespace(matmul_n=128, warmup=0, iters=1, layers=1, div=8, batch=2,
                               seq_len=32,
                               compile=False, models=args.models or ["tiny"])
    else:
        a = argparse.Namespace(matmul_n=8192, warmup=3, iters=10, layers=30, div=1, batch=16,
                               seq_len=2048, compile=True,
                               models=args.models or ["smollm-135m", "smollm-360m"])
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    t_start = time.perf_counter()
    res: dict = {
        "benchmark": "gpu", "dry_run": args.dry_run,
        "machine": {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"},
        "sections": {}, "errors": {}}

    def section(name, fn):
        t0 = time.perf_counter()
        try:
            res["sections"][name] = fn()
        except Exception as e:  # noqa: BLE001 - record and go on: one run, many figures
            res["errors"][name] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
        print(f"[{time.perf_counter() - t_start:6.1f} s] {name} ({time.perf_counter() - t0:.1f} s)"
              f": {json.dumps(res['sections'].get(name, res['errors'].get(name)))[:400]}",
              flush=True)

    section("matmul", lambda: bench_matmul(dev, a))
    peak = res["sections"].get("matmul", {}).get("tflops")
    section("newton_schulz", lambda: bench_ns(dev, a, peak))
    section("muon", lambda: bench_muon(dev, a))
    section("backend", lambda: bench_backend(dev))
    for m in a.models:
        section(f"train_{m}", lambda m=m: bench_train(dev, a, m, peak))
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
    for m in a.models[:1]:  # the trainer against the bare loop on the same shape
        for variant, name in (("plain", f"train_cli_plain_{m}"), ("2bw", f"train_cli_{m}")):
            section(name, lambda m=m, v=variant: bench_train_cli(
                dev, a, m, res["sections"].get(f"train_{m}"), v))
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(dev)
    res["total_s"] = time.perf_counter() - t_start
    out = Path(args.out) if args.out else (
        Path(__file__).resolve().parent.parent / "results"
        / ("gpu_dry_run.json" if args.dry_run else "gpu.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2))
    os.replace(tmp, out)
    print(f"total {res['total_s']:.1f} s; {len(res['errors'])} section(s) failed; wrote {out}")
    return res


if __name__ == "__main__":
    r = main()
    sys.exit(1 if r["errors"] else 0)
