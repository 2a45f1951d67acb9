"""Benchmark 4 — weight-version memory: PipeDream-2BW (2 versions) vs PipeDream (up to P).

P ranks run the real executor; every stage is one ``Linear(d, d)`` (d² fp32 weights, known
size). At every forward and backward each rank measures the bytes of the *distinct storages*
held by the executor's live weight versions (the stage's parameters included), and keeps the
peak. Expected: 2BW holds 2 versions on every stage; PipeDream holds P − s on stage s
(``Schedule.versions_held()``); GPipe/1F1B hold 1.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench_common import save
from pipeline_ranks import launch

from asyncpp.pipeline import build


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--dim", type=int, default=1024, help="stage = Linear(dim, dim), no bias")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--schedules", nargs="+", default=["2bw", "pipedream", "1f1b"])
    args = ap.parse_args(argv)
    P, m = args.stages, args.microbatches
    with tempfile.TemporaryDirectory() as tmp:
        raw = launch("memory", P, Path(tmp), dict(P=P, m=m, schedules=args.schedules,
                                                  d=args.dim, steps=args.steps), deadline=300)
    w = raw[args.schedules[0]]["param_bytes_per_stage"]
    print(f"\n## Weight-version memory, P={P}, m={m}, stage = {w / 2**20:.2f} MiB of weights")
    print("| schedule | stage | versions (measured) | versions (schedule) | peak bytes | "
          "× stage weights |")
    print("| --- | --- | --- | --- | --- | --- |")
    out = {"benchmark": "weight_memory", "P": P, "m": m, "stage_weight_bytes": w,
           "schedules": {}}
    ok = True
    for name in args.schedules:
        expected = build(name, P, m, args.steps).versions_held()
        r = raw[name]
        for s in range(P):
            b, v = r["peak_bytes"][s], r["peak_versions"][s]
            ok &= v == expected[s] and b == expected[s] * w
            print(f"| {name} | {s} | {v} | {expected[s]} | {b / 2**20:.2f} MiB | {b / w:.2f} |")
        out["schedules"][name] = {**r, "expected_versions": expected,
                                  "total_peak_bytes": sum(r["peak_bytes"])}
    totals = {n: out["schedules"][n]["total_peak_bytes"] for n in args.schedules}
    for n, t in totals.items():
        print(f"{n}: all stages together {t / 2**20:.2f} MiB = {t / w:.1f} × one stage's weights")
    out["matches_schedule"] = ok
    print(f"measured = schedule's versions × stage weights on every stage: {ok}")
    print("wrote", save("weight_memory", out))
    return out


if __name__ == "__main__":
    main()
