"""Benchmark 3 — pipeline throughput of the real executor: 2BW vs 1F1B vs GPipe.

P ranks (gloo, one process per stage) run :class:`asyncpp.pipeline.PipelineExecutor` on stages
whose forward sleeps ``t_f`` and backward ``t_b`` (tiny tensors), so the 2 shared cores are not
the bottleneck. For every P and m, each schedule's ``train_steps`` is timed over N₁ and N₂
batches (interleaved, ``repeats`` times); the steady-state time per step is the difference
quotient (T(N₂) − T(N₁)) / (N₂ − N₁), in which fill and drain cancel. Figures of merit:

* steady-state throughput ratio 2BW/1F1B against the ideal (m + P − 1)/m (target ≥ 0.95 ×);
* ``asyncpp.pipeline.simulate``'s makespan of the N₂-step schedule (same t_f, t_b, measured
  one-way P2P latency t_comm) against the measured makespan (target within 5 %); and the
  same simulation fed the per-stage forward/backward/update durations measured inside the
  executor (sleep + executor overhead), which separates a wrong model from unmodelled cost.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench_common import print_table, save, summary
from pipeline_ranks import launch

from asyncpp.pipeline import build, simulate


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--m-factors", type=int, nargs="+", default=[1, 2, 4],
                    help="m = factor × P")
    ap.add_argument("--schedules", nargs="+", default=["2bw", "1f1b", "gpipe"])
    ap.add_argument("--t-f", type=float, default=0.02, help="forward duration per stage, s")
    ap.add_argument("--t-b", type=float, default=0.04, help="backward duration per stage, s")
    ap.add_argument("--steps", type=int, nargs=2, default=[1, 4], metavar=("N1", "N2"))
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    n1, n2 = args.steps
    if not 0 < n1 < n2:
        raise ValueError(f"--steps needs 0 < N1 < N2, got {args.steps}")
    results: dict = {"benchmark": "pipeline_throughput", "t_f": args.t_f, "t_b": args.t_b,
                     "steps": [n1, n2], "repeats": args.repeats, "runs": {}}
    summary_rows = []
    for P in args.stages:
        ms = [f * P for f in args.m_factors]
        with tempfile.TemporaryDirectory() as tmp:
            raw = launch("throughput", P, Path(tmp), dict(
                P=P, ms=ms, schedules=args.schedules, t_f=args.t_f, t_b=args.t_b,
                steps=[n1, n2], repeats=args.repeats, rows_per_mb=2, d=8),
                deadline=600)
        t_comm = raw["t_comm"]
        tf_meas = raw["t_f_measured"]
        tb_meas = raw["t_b_measured"]
        print(f"\nP={P}: one-way P2P latency {1e3 * t_comm:.2f} ms; measured sleep per action "
              f"F {1e3 * statistics.mean(tf_meas):.1f} ms, B {1e3 * statistics.mean(tb_meas):.1f}"
              f" ms (nominal {1e3 * args.t_f:.0f}/{1e3 * args.t_b:.0f})")
        for m in ms:
            rows, per_step, run = [], {}, {}
            for name in args.schedules:
                t1 = raw["cases"][f"{name}|{m}|{n1}"]
                t2 = raw["cases"][f"{name}|{m}|{n2}"]
                steady = [(b - a) / (n2 - n1) for a, b in zip(t1, t2)]
                per_step[name] = statistics.median(steady)
                if per_step[name] <= 0:  # fill and drain did not cancel: noise, not a step
                    raise RuntimeError(
                        f"P={P}, m={m}, {name}: the steady step time (T(N2) - T(N1)) / (N2 - N1)"
                        f" = {per_step[name]:.4f} s is not positive, so timing noise exceeds "
                        f"{n2 - n1} step(s); raise --steps N2, --repeats or --t-f/--t-b")
                sim = simulate(build(name, P, m, n2), args.t_f, args.t_b, t_comm).makespan
                act = raw["actions"][f"{name}|{m}"]
                sim_cal = simulate(build(name, P, m, n2), act["F"], act["B"], t_comm,
                                   act["U"]).makespan
                meas = statistics.median(t2)
                run[name] = {"makespan_N2": summary(t2), "makespan_N1": summary(t1),
                             "steady_step_s": summary(steady), "sim_makespan_N2": sim,
                             "sim_calibrated_makespan_N2": sim_cal,
                             "sim_error": sim / meas - 1,
                             "sim_calibrated_error": sim_cal / meas - 1,
                             "measured_action_s": act}
                rows.append((f"{name} steady step", summary(steady)))
            print_table(f"P={P}, m={m}: seconds per step (steady state), ratio = 1f1b / case",
                        rows, baseline="1f1b steady step")
            ideal = (m + P - 1) / m
            ratio = per_step["1f1b"] / per_step["2bw"] if "2bw" in per_step else float("nan")
            run["ratio_2bw_over_1f1b"] = ratio
            run["ideal"] = ideal
            run["fraction_of_ideal"] = ratio / ideal
            print(f"2BW/1F1B throughput {ratio:.3f}, ideal (m+P-1)/m = {ideal:.3f}, "
                  f"fraction {ratio / ideal:.3f} (target >= 0.95)")
            for name in args.schedules:
                r = run[name]
                print(f"  {name}: measured makespan of {n2} steps "
                      f"{r['makespan_N2']['median']:.3f} s, simulated {r['sim_makespan_N2']:.3f}"
                      f" s ({100 * r['sim_error']:+.1f} %), with measured action times "
                      f"{r['sim_calibrated_makespan_N2']:.3f} s "
                      f"({100 * r['sim_calibrated_error']:+.1f} %) (target within 5 %)")
            results["runs"][f"P{P}_m{m}"] = run
            summary_rows.append((P, m, ratio, ideal, run))
        results[f"P{P}_t_comm"] = t_comm
        results[f"P{P}_t_f_measured"] = tf_meas
        results[f"P{P}_t_b_measured"] = tb_meas
    print("\n## Pipeline summary")
    print("| P | m | 2BW/1F1B | ideal | fraction | worst sim error (nominal) "
          "| worst sim error (measured actions) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for P, m, ratio, ideal, run in summary_rows:
        e = max(abs(run[n]["sim_error"]) for n in args.schedules)
        ec = max(abs(run[n]["sim_calibrated_error"]) for n in args.schedules)
        print(f"| {P} | {m} | {ratio:.3f} | {ideal:.3f} | {ratio / ideal:.3f} | "
              f"{100 * e:.1f} % | {100 * ec:.1f} % |")
    print("wrote", save("pipeline_throughput", results))
    return results


if __name__ == "__main__":
    main()
