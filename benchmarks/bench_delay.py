"""Benchmark 2 — delay-core overhead: DelayedOptimizer(Muon, delay=1) and + EF vs plain Muon.

Each case steps its own copy of the SmolLM-135M hidden matrices (default: 6 of the 30 layers)
with fresh gradients every step; the cases are interleaved. Target: time overhead ≤ 5 %.
Besides the ratio of medians (noisy on a shared machine), each call times the wrapped
optimizer's own ``step`` from inside, so the delay core's own work (the rest of the call) is
reported relative to it — both halves of one call see the same load.
Memory: the bytes the delay core holds, measured independently of its own ``extra_bytes()``
by walking every tensor reachable from the wrapper (minus the wrapped optimizer and the
parameters, distinct storages), against what the semantics need (delay 1: one pending
gradient, 1 × the parameters' bytes; EF: one more parameter-sized update buffer, 2 ×).
Newton–Schulz runs in float32 here (what ``ns_dtype="auto"`` picks on a CPU; bfloat16
matmuls are emulated on CPUs without AVX-512-BF16 and would only dilute the overhead).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import deque

import torch
from bench_common import interleaved, print_table, save, summary
from bench_muon import smollm_135m_shapes

from asyncpp.delay import DelayedOptimizer
from asyncpp.optim import Muon


def reachable_bytes(obj, exclude: set[int]) -> int:
    """Bytes of the distinct tensor storages reachable from ``obj`` (containers and object
    attributes, recursively), skipping objects whose id is in ``exclude``."""
    seen_obj, seen_storage, total = set(), set(), 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen_obj or id(o) in exclude:
            continue
        seen_obj.add(id(o))
        if isinstance(o, torch.Tensor):
            st = o.untyped_storage()
            if st.data_ptr() not in seen_storage:
                seen_storage.add(st.data_ptr())
                total += st.nbytes()
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset, deque)):
            stack.extend(o)
        elif hasattr(o, "__dict__") and not isinstance(o, type):
            stack.extend(vars(o).values())
    return total


def make_case(shapes, delay, correction, ns_dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(0.02 * torch.randn(s, generator=g)) for s in shapes]
    grads = [torch.randn(s, generator=g) for s in shapes]
    inner = Muon(params, lr=1e-3, ns_dtype=ns_dtype)
    opt = inner if delay is None else DelayedOptimizer(inner, delay=delay, correction=correction)
    inner_times: list[float] = []
    inner_step = inner.step

    def timed_inner_step(*a, **k):   # the wrapped optimizer's own step, timed from inside
        t0 = time.perf_counter()
        try:
            return inner_step(*a, **k)
        finally:
            inner_times.append(time.perf_counter() - t0)

    inner.step = timed_inner_step
    totals: list[float] = []

    def step():
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        n = len(inner_times)
        t0 = time.perf_counter()
        opt.step()
        totals.append(time.perf_counter() - t0)
        # what the step spent outside the inner optimizer (the delay core's own work)
        own.append(totals[-1] - sum(inner_times[n:]))
        inside.append(sum(inner_times[n:]))

    own: list[float] = []
    inside: list[float] = []
    step.own, step.inside = own, inside
    return step, opt, params


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--ns-dtype", default="float32")
    ap.add_argument("--div", type=int, default=1, help="shrink every side (smoke tests)")
    args = ap.parse_args(argv)
    shapes = smollm_135m_shapes(args.layers, args.div)
    cases = {
        "Muon": make_case(shapes, None, "none", args.ns_dtype),
        "Delayed(Muon, 1)": make_case(shapes, 1, "none", args.ns_dtype),
        "Delayed(Muon, 1) + EF": make_case(shapes, 1, "ef", args.ns_dtype),
    }
    times = interleaved({k: v[0] for k, v in cases.items()}, args.repeats, warmup=2)
    rows = [(k, summary(v)) for k, v in times.items()]
    n_params = sum(p.numel() for p in cases["Muon"][2])
    print(f"{len(shapes)} matrices, {n_params / 1e6:.1f}M parameters (fp32)")
    print_table("optimizer step incl. gradient copy-in", rows, baseline="Muon")
    base = rows[0][1]["median"]
    overhead = {k: s["median"] / base - 1 for k, s in rows[1:]}
    # Load-robust figure: per call, the time outside the inner optimizer's step over the time
    # inside it (both in the same call, so machine load hits them alike).
    n_warm = 2
    own = {}
    for k, (step, _, _) in cases.items():
        o, i = step.own[n_warm:], step.inside[n_warm:]
        own[k] = {"own_median_s": statistics.median(o),
                  "inner_median_s": statistics.median(i) if any(i) else 0.0,
                  "own_over_inner": statistics.median([a / b for a, b in zip(o, i) if b > 0])}
    print("\n| case | time outside the inner step (median) | inside | outside / inside |")
    print("| --- | --- | --- | --- |")
    for k, v in own.items():
        print(f"| {k} | {1e3 * v['own_median_s']:.1f} ms | {v['inner_median_s']:.3f} s | "
              f"{100 * v['own_over_inner']:.2f} % |")
    intrinsic = {k: own[k]["own_over_inner"] - own["Muon"]["own_over_inner"]
                 for k in list(cases)[1:]}
    memory = {}
    param_bytes = 4 * n_params
    for k, need in (("Delayed(Muon, 1)", 1), ("Delayed(Muon, 1) + EF", 2)):
        _, dopt, params = cases[k]
        exclude = {id(dopt.optimizer), *(id(p) for p in params)}
        b = reachable_bytes(dopt, exclude)
        memory[k] = {"measured_bytes": b, "extra_bytes_reported": dopt.extra_bytes(),
                     "needed_bytes": need * param_bytes, "bytes_per_param": b / n_params}
        print(f"{k}: time overhead {100 * overhead[k]:+.1f} % (ratio of medians), "
              f"{100 * intrinsic[k]:+.2f} % (own work / inner step) (target ≤ 5 %); memory "
              f"{b / 2**20:.1f} MiB = {b / param_bytes:.2f} × the parameters "
              f"(needed {need} ×; its own extra_bytes() says {dopt.extra_bytes() / 2**20:.1f} MiB)")
    result = {"benchmark": "delay_overhead", "params": n_params, "times": dict(rows),
              "overhead": overhead, "own_time": own, "intrinsic_overhead": intrinsic,
              "memory": memory}
    print("wrote", save("delay_overhead", result))
    return result


if __name__ == "__main__":
    main()
