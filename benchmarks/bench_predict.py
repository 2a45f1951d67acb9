"""The timing simulator with measured op costs against the measured step time of 1F1B and 2BW.

Two ranks, one thread each, a real model: an MLP of ``layers`` Linear(d, d) + tanh blocks
(float32, AdamW), half the blocks per rank, ``rows`` rows per microbatch. Each case (schedule,
m) runs ``steps`` streamed steps per round, ``rounds`` interleaved rounds. The executor's
forward, backward and update handlers are timed as they run (per stage: the mean of each, an
update counted as its launch plus its application), the one-way latency of an
activation-sized message is measured by ping-pong, and the runtime's own cost per action
t_act is the main thread's CPU time outside those handlers divided by the actions of the
rank's program (dispatch, posting sends and receives, version bookkeeping; blocking waits
take no CPU time). The simulator (:func:`asyncpp.pipeline.simulate` on
``build(schedule, 2, m, steps)``) predicts the makespan twice: from the work alone
(t_f, t_b, t_upd, latency) and with ``t_action = t_act``. Prints both predictions and the
measured seconds per step (medians), the relative errors (target: within 10 %), and writes
``results/predict.json``.

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
    """Time the forward, backward and update handlers as they run (wall clock, into
    ``acc[key]``) and sum their thread CPU time (into ``acc["cpu"]``)."""
    for key, attr in (("F", "_forward"), ("B", "_backward"), ("U", "_launch_update"),
                      ("U", "_apply")):
        fn = getattr(ex, attr)

        def wrapped(*a, _fn=fn, _key=key, **k):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return _fn(*a, **k)
            finally:
                acc[_key].append(time.perf_counter() - t0)
                acc["cpu"][0] += time.thread_time() - c0

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
        ExecutorOptions,
        PipelineExecutor,
        PipelineTopology,
        build,
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
            ex = PipelineExecutor(stage, dopt, schedule=name, num_microbatches=m, topology=topo,
                                  loss_fn=nn.functional.mse_loss,
                                  options=ExecutorOptions(timeout=300))
            ex.train_steps(data[:2])  # warm-up
            acc = {"F": [], "B": [], "U": [], "cpu": [0.0]}
            _timed(ex, acc)
            exes[(name, m)] = (ex, acc, data)
    walls: dict = {}
    overheads: dict = {}
    busy: dict = {}  # the main thread's CPU time / wall time: how busy the rank was
    actions = {key: len(build(key[0], 2, key[1], args.steps).actions[s]) for key in exes}
    for _ in range(args.rounds):
        for (name, m), (ex, acc, data) in exes.items():
            dist.barrier()
            acc["cpu"][0] = 0.0
            t0, c0 = time.perf_counter(), time.thread_time()
            ex.train_steps(data)
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            walls.setdefault(f"{name}|{m}", []).append(wall / args.steps)
            # the runtime's own cost: the main thread's CPU time outside the timed handlers
            # (blocking waits take none), per action of this rank's program
            overheads.setdefault((name, m), []).append(
                (cpu - acc["cpu"][0]) / actions[(name, m)])
            busy.setdefault((name, m), []).append(cpu / wall)
    for (name, m), (_, acc, _) in exes.items():
        n_u = len(acc["U"]) / 2 or 1
        # means: the step time is their sum, so a slow forward counts (a median would not)
        mine = torch.tensor([statistics.fmean(acc["F"]), statistics.fmean(acc["B"]),
                             sum(acc["U"]) / n_u, statistics.median(overheads[(name, m)]),
                             statistics.median(busy[(name, m)])], dtype=torch.float64)
        every = [torch.zeros(5, dtype=torch.float64) for _ in range(2)]
        dist.all_gather(every, mine)
        res["cases"][f"{name}|{m}"] = {"costs": [[float(x) for x in v[:4]] for v in every],
                                       "busy": [float(v[4]) for v in every],
                                       "wall": walls[f"{name}|{m}"]}
    if dist.get_rank() == 0:
        (outdir / "result.json").write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


def render(r: dict) -> str:
    """The README block of a ``results/predict.json``."""
    a, m = r["args"], r["machine"]
    lines = [f"Run of {m['date']}, torch {m['torch']}: d = {a['d']}, {a['layers']} layers, "
             f"{a['rows']} rows per microbatch, {a['steps']} steps × {a['rounds']} interleaved "
             f"rounds, activation latency {r['latency_s'] * 1e3:.2f} ms, load at the end "
             f"{r['load_end'][0]:.1f}.", "",
             "| schedule | m | t_f / t_b / t_upd / t_act ms (stage 0 \\| stage 1) | predicted, "
             "work only | predicted, + t_act | measured (range) | busy, rank 0 / 1 |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in r["cases"]:
        costs = " \\| ".join(" / ".join(f"{x * 1e3:.2f}" if i == 3 else f"{x * 1e3:.1f}"
                                         for i, x in enumerate(st)) for st in c["costs_s"])
        lo, hi = c["measured_range_s"]
        lines.append(f"| {c['schedule']} | {c['m']} | {costs} | {c['predicted_work_s'] * 1e3:.1f} "
                     f"ms ({c['error_work']:+.1%}) | {c['predicted_s'] * 1e3:.1f} ms "
                     f"({c['error']:+.1%}) | {c['measured_s'] * 1e3:.1f} ms ({lo * 1e3:.1f}–"
                     f"{hi * 1e3:.1f}) | " + (" / ".join(f"{b:.0%}" for b in c["busy"])
                                                if "busy" in c else "—") + " |")
    worst_w = max(abs(c["error_work"]) for c in r["cases"])
    lines += ["", f"Worst error: **{r['worst_error']:.1%}** with the runtime's per-action cost "
              f"(target: within 10 %), {worst_w:.1%} from the work alone."]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, nargs="+", default=[2, 4])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--rows", type=int, default=64, help="rows per microbatch")
    p.add_argument("--no-save", action="store_true", help="do not write results/predict.json")
    p.add_argument("--render", action="store_true",
                   help="only rewrite the README block from results/predict.json")
    p.add_argument("--rank-of", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_of is not None:
        rank_main(Path(args.rank_of), args)
        return 0
    sys.path.insert(0, str(HERE.parent))
    from bench_common import save, write_readme_block

    if args.render:
        r = json.loads((HERE.parent / "results" / "predict.json").read_text())
        print("wrote", write_readme_block("predict", render(r)))
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
    print(f"{'case':<10} {'t_f/t_b/t_upd/t_act ms (stage 0 | stage 1)':<46} "
          f"{'work only':>16} {'+ t_act':>16} {'measured [range]':>24}")
    rows = []
    for key, case in res["cases"].items():
        name, m = key.split("|")
        costs = case["costs"]
        sched = build(name, 2, int(m), args.steps)
        work = [[c[i] for c in costs] for i in range(3)]
        pred_work = simulate(sched, *work[:2], tc, work[2]).makespan / args.steps
        pred = simulate(sched, *work[:2], tc, work[2],
                        t_action=[c[3] for c in costs]).makespan / args.steps
        wall = case["wall"]
        meas = statistics.median(wall)
        rows.append({"schedule": name, "m": int(m), "costs_s": costs, "busy": case["busy"],
                     "measured_s": meas,
                     "measured_range_s": [min(wall), max(wall)], "predicted_work_s": pred_work,
                     "predicted_s": pred, "error_work": (pred_work - meas) / meas,
                     "error": (pred - meas) / meas})
        cost_txt = " | ".join("/".join(f"{x * 1e3:.2f}" if i == 3 else f"{x * 1e3:.1f}"
                                       for i, x in enumerate(c)) for c in costs)
        print(f"{name} m={m:<4} {cost_txt:<46} {pred_work * 1e3:>6.1f}ms "
              f"{rows[-1]['error_work']:>+6.1%} {pred * 1e3:>6.1f}ms {rows[-1]['error']:>+6.1%} "
              f"{meas * 1e3:>8.1f}ms "
              f"[{min(wall) * 1e3:.1f}, {max(wall) * 1e3:.1f}]")
    worst = max(abs(r["error"]) for r in rows)
    print(f"worst error with the runtime's per-action cost: {worst:.1%} (target: within 10 %); "
          f"work only: {max(abs(r['error_work']) for r in rows):.1%}")
    if not args.no_save:
        path = save("predict", {
            "args": {k: v for k, v in vars(args).items()
                     if k not in ("rank_of", "no_save", "render")},
            "load_end": os.getloadavg(), "latency_s": tc, "cases": rows, "worst_error": worst})
        print("wrote", path)
        if write_readme_block("predict", render(json.loads(Path(path).read_text()))):
            print("wrote benchmarks/README.md (the predict block)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
