"""The timing simulator with measured op costs against the measured step time of 1F1B and 2BW.

Two ranks, one thread each, a real model: an MLP of ``layers`` Linear(d, d) + tanh blocks
(float32, AdamW), half the blocks per rank, ``rows`` rows per microbatch. Each case (schedule,
m) runs ``steps`` streamed steps per round, ``rounds`` interleaved rounds. The executor's
forward, backward and update handlers are timed as they run (per stage: the mean of each, an
update counted as its launch plus its application), the one-way latency of an
activation-sized message is measured by ping-pong, and the simulator
(:func:`asyncpp.pipeline.simulate` on ``build(schedule, 2, m, steps)``) predicts the
makespan from those four costs. Prints predicted and measured seconds per step (medians) and
the relative error (target: within 10 %).

    python benchmarks/bench_predict.py [--m 2 4] [--rounds 5] [--steps 12] [--d 768]
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
SCHEDULES = ("1f1b", "2bw")


def _timed(ex, acc):
    for key, attr in (("F", "_forward"), ("B", "_backward"), ("U", "_launch_update"),
                      ("U", "_apply")):
        fn = getattr(ex, attr)

        def wrapped(*a, _fn=fn, _key=key, **k):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                acc[_key].append(time.perf_counter() - t0)

        setattr(ex, attr, wrapped)


def _latency(topo, shape, rounds=40) -> float:
    x = torch.zeros(shape)
    peer = topo.stage_ranks[1 - topo.stage]
    rts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        if topo.stage == 0:
            dist.send(x, peer)
            dist.recv(x, peer)
        else:
            dist.recv(x, peer)
            dist.send(x, peer)
        rts.append(time.perf_counter() - t0)
    return statistics.median(rts) / 2


def rank_main(outdir: Path, args) -> None:
    from asyncpp.delay import DelayedOptimizer
    from asyncpp.pipeline import (
        PipelineExecutor,
        PipelineTopology,
        build_stages,
        init_distributed,
        stage_delay,
    )

    init_distributed("cpu", timeout=300)
    torch.set_num_threads(1)
    topo = PipelineTopology.create(2, timeout=300)
    s = topo.stage
    res: dict = {"latency": _latency(topo, (args.rows, args.d)), "cases": {}}
    g = torch.Generator().manual_seed(1)
    exes = {}
    for m in args.m:
        rows = m * args.rows
        data = [(torch.randn(rows, args.d, generator=g), torch.randn(rows, args.d, generator=g))
                for _ in range(args.steps)]
        for name in SCHEDULES:
            torch.manual_seed(0)
            layers = [(f"blocks.{j}", nn.Sequential(nn.Linear(args.d, args.d), nn.Tanh()))
                      for j in range(args.layers)]
            stage = build_stages(layers, 2, boundaries=[args.layers // 2], stages=[s])[0]
            dopt = DelayedOptimizer(torch.optim.AdamW(stage.parameters(), lr=1e-4),
                                    delay=stage_delay(name, 2, s))
            ex = PipelineExecutor(stage, dopt, schedule=name, num_microbatches=m,
                                  topology=topo, loss_fn=nn.functional.mse_loss, timeout=300)
            ex.train_steps(data[:2])  # warm-up
            acc = {"F": [], "B": [], "U": []}
            _timed(ex, acc)
            exes[(name, m)] = (ex, acc, data)
    walls: dict = {}
    for _ in range(args.rounds):
        for (name, m), (ex, _, data) in exes.items():
            dist.barrier()
            t0 = time.perf_counter()
            ex.train_steps(data)
            walls.setdefault(f"{name}|{m}", []).append((time.perf_counter() - t0) / args.steps)
    for (name, m), (_, acc, _) in exes.items():
        n_u = len(acc["U"]) / 2 or 1
        mine = torch.tensor([statistics.median(acc["F"]), statistics.median(acc["B"]),
                             sum(acc["U"]) / n_u], dtype=torch.float64)
        every = [torch.zeros(3, dtype=torch.float64) for _ in range(2)]
        dist.all_gather(every, mine)
        res["cases"][f"{name}|{m}"] = {"costs": [[float(x) for x in v] for v in every],
                                       "wall": walls[f"{name}|{m}"]}
    if dist.get_rank() == 0:
        (outdir / "result.json").write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, nargs="+", default=[2, 4])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--rows", type=int, default=64, help="rows per microbatch")
    p.add_argument("--rank-of", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_of is not None:
        rank_main(Path(args.rank_of), args)
        return 0
    from asyncpp.pipeline import build, simulate
    from asyncpp.pipeline.launch import run_ranks

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        run_ranks([sys.executable, str(HERE), *sys.argv[1:], "--rank-of", str(out)], 2, out,
                  deadline=3000)
        res = json.loads((out / "result.json").read_text())
    tc = res["latency"]
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average, {os.cpu_count()} cores); d={args.d}, "
          f"{args.layers} layers, {args.rows} rows per microbatch, {args.steps} steps x "
          f"{args.rounds} interleaved rounds; activation latency {tc * 1e3:.2f} ms")
    print(f"{'case':<10} {'t_f / t_b / t_upd ms (stage 0 | stage 1)':<44} "
          f"{'predicted':>10} {'measured [range]':>24} {'error':>7}")
    for key, case in res["cases"].items():
        name, m = key.split("|")
        costs = case["costs"]
        sim = simulate(build(name, 2, int(m), args.steps), [c[0] for c in costs],
                       [c[1] for c in costs], tc, [c[2] for c in costs])
        pred = sim.makespan / args.steps
        wall = case["wall"]
        meas = statistics.median(wall)
        cost_txt = " | ".join("/".join(f"{x * 1e3:.1f}" for x in c) for c in costs)
        print(f"{name} m={m:<4} {cost_txt:<44} {pred * 1e3:>8.1f}ms "
              f"{meas * 1e3:>8.1f}ms [{min(wall) * 1e3:.1f}, {max(wall) * 1e3:.1f}] "
              f"{(pred - meas) / meas:>+7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
