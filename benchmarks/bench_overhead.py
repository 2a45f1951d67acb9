"""The executor's per-action Python overhead, in one process.

A tiny stage (``Linear(d, d)``, d = 4 by default, float32, SGD) makes the compute negligible, so
the time of ``run_steps`` over ``steps`` steps of a schedule at P = 1 is the interpreter's own
cost: dispatch, version bookkeeping, the update queue, the delay core. Subtracting the same
work done by a plain loop (``functional_call`` forward, backward, ``DelayedOptimizer.step``)
leaves the executor's overhead; divided by the actions run, the overhead per action (median
over ``rounds``).

    python benchmarks/bench_overhead.py [--schedule 2bw] [--m 8] [--steps 200] [--rounds 7]

Run it against another checkout with ``PYTHONPATH=<checkout>/src`` to compare versions.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.func import functional_call


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schedule", default="2bw")
    p.add_argument("--m", type=int, default=8)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--d", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    import asyncpp.pipeline as pl
    from asyncpp.delay import DelayedOptimizer
    from asyncpp.pipeline import PipelineExecutor, build, stage_delay

    d, m = args.d, args.m
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(m, d, generator=g), torch.randn(m, d, generator=g))
               for _ in range(args.steps)]

    def executor():
        torch.manual_seed(0)
        stage = nn.Sequential(nn.Linear(d, d))
        dopt = DelayedOptimizer(torch.optim.SGD(stage.parameters(), lr=1e-3),
                                delay=stage_delay(args.schedule, 1, 0))
        return PipelineExecutor(stage, dopt, schedule=args.schedule, num_microbatches=m,
                                loss_fn=nn.functional.mse_loss)

    def plain():
        torch.manual_seed(0)
        stage = nn.Sequential(nn.Linear(d, d))
        dopt = DelayedOptimizer(torch.optim.SGD(stage.parameters(), lr=1e-3),
                                delay=stage_delay(args.schedule, 1, 0))
        weights = dict(stage.named_parameters())
        t0 = time.perf_counter()
        for x, y in batches:
            for xm, ym in zip(torch.tensor_split(x, m), torch.tensor_split(y, m)):
                nn.functional.mse_loss(functional_call(stage, weights, (xm,)), ym).backward()
            dopt.step()
            dopt.zero_grad()
        return time.perf_counter() - t0

    n_actions = sum(len(a) for a in build(args.schedule, 1, m, args.steps).actions)
    exec_t, plain_t = [], []
    for _ in range(args.rounds):
        ex = executor()
        t0 = time.perf_counter()
        for _out in ex.run_steps(batches, len(batches)):
            pass
        exec_t.append(time.perf_counter() - t0)
        plain_t.append(plain())
    e, q = statistics.median(exec_t), statistics.median(plain_t)
    print(f"{pl.__file__}")
    print(f"{args.schedule}, P = 1, m = {m}, {args.steps} steps, {n_actions} actions, "
          f"d = {d}: executor {e * 1e3:.1f} ms, plain loop {q * 1e3:.1f} ms (medians of "
          f"{args.rounds}); overhead {(e - q) / n_actions * 1e6:.1f} µs per action "
          f"[{(min(exec_t) - q) / n_actions * 1e6:.1f}, "
          f"{(max(exec_t) - q) / n_actions * 1e6:.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
