"""Several stages per rank, measured: WPipe's 4 partitions on 2 ranks against PipeDream-2BW's 2
stages on the same 2 ranks (and looped 1F1B against 1F1B), on one model.

Model: an MLP of ``layers`` Linear(d, d) + tanh blocks (float32, AdamW); 2BW/1F1B put
layers/2 blocks on each rank, WPipe and looped 1F1B layers/4 blocks on each of 4 stages, two
per rank (WPipe: partitions d and 2 + d on rank d; looped: stages r and r + 2). Each round runs
``steps`` streamed steps of every case (interleaved), ``rounds`` rounds; prints the median
steps/s and its range, the ratios to 2BW, and per rank the peak bytes of distinct
weight-version storages (sampled at every forward of an untimed warm-up run), whose ratio
WPipe/2BW the schedule data predicts to be 0.75 (``tests/test_wpipe.py``).

    python benchmarks/bench_colocated.py [--m 4 8] [--rounds 5] [--steps 12] [--d 512]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

HERE = Path(__file__).resolve()
CASES = [("2bw", 2, None), ("wpipe", 4, "default"), ("1f1b", 2, None), ("1f1b", 4, "looped")]


def _label(name, P, placement):
    return f"{name} P={P}" + ("" if placement is None else f" ({placement}, 2 per rank)")


def _layers(n: int, d: int):
    torch.manual_seed(0)
    return [(f"blocks.{j}", nn.Sequential(nn.Linear(d, d), nn.Tanh())) for j in range(n)]


def _storage_bytes(ex) -> int:
    seen, total = set(), 0
    for ctx in ex.contexts.values():
        for tensors in ctx.versions.values():
            for t in tensors.values():
                st = t.untyped_storage()
                if st.data_ptr() not in seen:
                    seen.add(st.data_ptr())
                    total += st.nbytes()
    return total


def _executor(topo, name, P, placement, m, args):
    from asyncpp.delay import DelayedOptimizer
    from asyncpp.pipeline import (
        ExecutorOptions,
        PipelineExecutor,
        build,
        build_stages,
        default_devices,
        looped_devices,
        stage_delay,
    )

    layers = _layers(args.layers, args.d)
    bounds = [args.layers // P * s for s in range(1, P)]
    if placement is None:
        mine = [topo.stage]
        devs = None
    else:
        devs = default_devices(build(name, P, m)) if placement == "default" \
            else looped_devices(P, topo.num_stages)
        mine = devs[topo.stage]
    mods = dict(zip(mine, build_stages(layers, P, boundaries=bounds, stages=mine)))
    opts = {s: DelayedOptimizer(torch.optim.AdamW(mod.parameters(), lr=1e-4),
                                delay=stage_delay(name, P, s)) for s, mod in mods.items()}
    kw = dict(schedule=name, num_microbatches=m, topology=topo,
              loss_fn=nn.functional.mse_loss, options=ExecutorOptions(timeout=300))
    if devs is None:
        return PipelineExecutor(mods[topo.stage], opts[topo.stage], **kw)
    return PipelineExecutor(mods, opts, placement=devs, **kw)


def rank_main(outdir: Path, args) -> None:
    from asyncpp.pipeline import PipelineTopology, init_distributed

    init_distributed("cpu", timeout=300)
    torch.set_num_threads(1)
    topo = PipelineTopology.create(2, timeout=300)
    g = torch.Generator().manual_seed(1)
    res: dict = {"times": {}, "bytes": {}}
    for m in args.m:
        rows = m * args.rows
        data = [(torch.randn(rows, args.d, generator=g), torch.randn(rows, args.d, generator=g))
                for _ in range(args.steps)]
        exes = {}
        for name, P, placement in CASES:
            ex = _executor(topo, name, P, placement, m, args)
            peak = {"b": 0}
            orig = ex._forward

            def fwd(*a, _orig=orig, _ex=ex, _peak=peak, **k):
                _peak["b"] = max(_peak["b"], _storage_bytes(_ex))
                return _orig(*a, **k)

            ex._forward = fwd
            ex.train_steps(data)  # warm-up, and the memory sampled (untimed)
            del ex._forward
            exes[_label(name, P, placement)] = (ex, peak)
        for _ in range(args.rounds):
            for label, (ex, _) in exes.items():
                dist.barrier()
                t0, c0 = time.perf_counter(), time.thread_time()
                ex.train_steps(data)
                wall = time.perf_counter() - t0
                res["times"].setdefault(f"{label}|{m}", []).append(args.steps / wall)
                # how busy this rank was: its main thread's CPU time over the wall time
                res.setdefault("busy_rank", {}).setdefault(f"{label}|{m}", []).append(
                    (time.thread_time() - c0) / wall)
        for label, (_, peak) in exes.items():
            busy = statistics.median(res["busy_rank"][f"{label}|{m}"])
            mine = torch.tensor([float(peak["b"]), busy], dtype=torch.float64)
            every = [torch.zeros(2, dtype=torch.float64) for _ in range(2)]
            dist.all_gather(every, mine)
            res["bytes"][f"{label}|{m}"] = [int(v[0]) for v in every]
            res.setdefault("busy", {})[f"{label}|{m}"] = [float(v[1]) for v in every]
    if dist.get_rank() == 0:
        (outdir / "result.json").write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


def render(r: dict) -> str:
    """The README block of a ``results/colocated.json``."""
    a, mach = r["args"], r["machine"]
    lines = [f"Run of {mach['date']}, torch {mach['torch']}: d = {a['d']}, {a['layers']} "
             f"layers, {a['rows']} rows per microbatch, {a['steps']} steps × {a['rounds']} "
             f"interleaved rounds, load at the end {r['load_end'][0]:.1f}.", "",
             "| m | case | steps/s, median (range) | ÷ 2BW | weight-version MB per rank | ÷ 2BW "
             "| busy, rank 0 / 1 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, c in r["cases"].items():
        lab, m = key.rsplit("|", 1)
        lo, hi = c["range"]
        mb = " / ".join(f"{b / 2**20:.2f}" for b in c["version_bytes_per_rank"])
        lines.append(f"| {m} | {lab} | {c['steps_per_s']:.1f} ({lo:.1f}–{hi:.1f}) | "
                     f"{c['vs_2bw']:.2f} | {mb} | {c['version_bytes_vs_2bw']:.2f} | "
                     + (" / ".join(f"{b:.0%}" for b in c["busy"]) if "busy" in c else "—")
                     + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, nargs="+", default=[4, 8])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--rows", type=int, default=64, help="rows per microbatch")
    p.add_argument("--no-save", action="store_true", help="do not write results/colocated.json")
    p.add_argument("--render", action="store_true",
                   help="only rewrite the README block from results/colocated.json")
    p.add_argument("--rank-of", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_of is not None:
        rank_main(Path(args.rank_of), args)
        return 0
    sys.path.insert(0, str(HERE.parent))
    from bench_common import save, write_readme_block

    if args.render:
        r = json.loads((HERE.parent / "results" / "colocated.json").read_text())
        print("wrote", write_readme_block("colocated", render(r)))
        return 0
    from asyncpp.pipeline.launch import run_ranks

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        argv = [a for a in sys.argv[1:]]
        run_ranks([sys.executable, str(HERE), *argv, "--rank-of", str(out)], 2, out,
                  deadline=3000)
        res = json.loads((out / "result.json").read_text())
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average, {os.cpu_count()} cores); "
          f"d={args.d}, {args.layers} layers, {args.rows} rows per microbatch, "
          f"{args.steps} steps x {args.rounds} interleaved rounds")
    table = {}
    for m in args.m:
        base = statistics.median(res["times"][f"{_label('2bw', 2, None)}|{m}"])
        base_b = max(res["bytes"][f"{_label('2bw', 2, None)}|{m}"])
        print(f"\nm = {m}")
        print(f"{'case':<34} {'steps/s median [range]':>26} {'÷ 2bw':>6} "
              f"{'weight-version MB per rank':>28} {'÷ 2bw':>6}")
        for name, P, placement in CASES:
            lab = _label(name, P, placement)
            ts = res["times"][f"{lab}|{m}"]
            med = statistics.median(ts)
            b = res["bytes"][f"{lab}|{m}"]
            mb = " / ".join(f"{x / 2**20:.2f}" for x in b)
            print(f"{lab:<34} {med:>8.2f} [{min(ts):.2f}, {max(ts):.2f}]{'':>4} "
                  f"{med / base:>6.2f} {mb:>28} {max(b) / base_b:>6.2f}")
            table[f"{lab}|{m}"] = {"steps_per_s": med, "range": [min(ts), max(ts)],
                                   "vs_2bw": med / base, "version_bytes_per_rank": b,
                                   "version_bytes_vs_2bw": max(b) / base_b,
                                   "busy": res["busy"][f"{lab}|{m}"]}
    if not args.no_save:
        path = save("colocated", {
            "args": {k: v for k, v in vars(args).items()
                     if k not in ("rank_of", "no_save", "render")},
            "load_end": os.getloadavg(), "cases": table})
        print("wrote", path)
        if write_readme_block("colocated", render(json.loads(Path(path).read_text()))):
            print("wrote benchmarks/README.md (the colocated block)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
