"""Asynchronous pipelining through the front door: ``asyncpp-train`` under ``torchrun``.

Each schedule is one real CLI launch (``torchrun --standalone -m asyncpp.train.cli --config
configs/demo.toml --pipeline.schedule S ...``), one torch thread per rank, run back to back and
repeated in interleaved rounds; the figure is ``steady_tokens_per_s`` from each run's
``summary.json`` (compile/warm-up steps and the final evaluation excluded), median over rounds.
Ratios: 2BW ÷ 1F1B (ideal (m + P − 1)/m: 1F1B idles P − 1 of every m + P − 1 microbatch slots,
2BW never drains) and 2BW + EF ÷ 2BW (EF's cost).

    .venv/bin/python benchmarks/bench_async_cli.py                   # 2 ranks: P = 2, m = 2
    .venv/bin/python benchmarks/bench_async_cli.py --ranks 4 --microbatches 4   # P = 4

When async pays, on one engine: 2BW against asyncpp's zero-bubble schedules through the CLI
(ZB-V runs 2P stages, two per rank, so every case gets 2P layers, untied weights and a
gradient clip per stage)::

    .venv/bin/python benchmarks/bench_async_cli.py --ranks 4 --microbatches 8 --layers 8 \\
        --untied --clip-scope stage --cases 1f1b zb-h1 zb-v 2bw --name zb_P4_m8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import save, write_readme_block

ROOT = Path(__file__).resolve().parents[1]
CASES = {  # name: extra CLI arguments
    "1f1b": ["--pipeline.schedule", "1f1b", "--delay.correction", "none"],
    "gpipe": ["--pipeline.schedule", "gpipe", "--delay.correction", "none"],
    "2bw": ["--pipeline.schedule", "2bw", "--delay.correction", "none"],
    "2bw+ef": ["--pipeline.schedule", "2bw", "--delay.correction", "ef"],
    "zb-h1": ["--pipeline.schedule", "zb-h1", "--delay.correction", "none"],
    "zb-v": ["--pipeline.schedule", "zb-v", "--delay.correction", "none"],
}
# ZB-V cuts the model into two stages per rank, placed in a V; every other case one per rank
STAGES_PER_RANK = {"zb-v": 2}


def launch(name: str, args, run_dir: Path, env: dict) -> dict:
    """One torchrun launch of the CLI; returns its summary.json."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(args.ranks), "-m", "asyncpp.train.cli",
           "--config", str(ROOT / "configs" / "demo.toml"), *CASES[name],
           "--pipeline.stages", str(args.ranks * STAGES_PER_RANK.get(name, 1)),
           "--pipeline.microbatches",
           str(args.microbatches), "--train.batch_size", str(args.batch),
           "--train.steps", str(args.steps), "--train.eval_every", "0",
           "--train.log_every", str(args.log_every), "--run.threads", "1",
           "--run.dir", str(run_dir), "--run.overwrite", "true", "--log.progress", "false",
           "--log.plot", "false", "--log.tensorboard", "off"]
    if args.model:
        cmd += ["--model.name", args.model]
    if args.layers:
        cmd += ["--model.n_layers", str(args.layers)]
    if args.untied:
        cmd += ["--model.tie_embeddings", "false"]
    if args.clip_scope:
        cmd += ["--train.clip_scope", args.clip_scope]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads((run_dir / "summary.json").read_text())


def render(r: dict) -> str:
    """The README block of a ``results/async_cli_P*_m*.json``."""
    P, m = r["ranks"], r["microbatches"]
    mach = r.get("machine", {})
    lines = [f"Run of {mach.get('date', '?')}, torch {mach.get('torch', '?')}: {P} ranks "
             f"(P = {P}, m = {m}), {r['steps']} steps × {r['rounds']} rounds, load "
             f"{r['load_before'][0]:.1f} → {r['load_after'][0]:.1f}.", "",
             "| schedule | steady tokens/s (median) | rounds |", "| --- | --- | --- |"]
    for k, v in r["steady_tokens_per_s"].items():
        lines.append(f"| {k} | {r['median'][k]:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |")
    lines.append("")
    if "2bw_over_1f1b" in r:
        lines.append(f"2BW ÷ 1F1B = **{r['2bw_over_1f1b']:.3f}** (ideal "
                     f"{r['ideal_2bw_over_1f1b']:.3f})"
                     + (f"; 2BW + EF ÷ 2BW = **{r['2bw_ef_over_2bw']:.3f}**."
                        if "2bw_ef_over_2bw" in r else "."))
    if "2bw_over_best_zero_bubble" in r:
        lines.append(f"2BW ÷ the faster zero-bubble schedule ({r['best_zero_bubble']}) = "
                     f"**{r['2bw_over_best_zero_bubble']:.3f}**"
                     + (f" ({P} processes sharing the machine's cores)" if P > 2 else "") + ".")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2, help="ranks = pipeline stages P")
    ap.add_argument("--microbatches", type=int, default=2, help="m")
    ap.add_argument("--batch", type=int, default=8, help="train.batch_size")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--model", default="", help="override the demo's model (e.g. tiny)")
    ap.add_argument("--layers", type=int, default=0,
                    help="model.n_layers for every case (ZB-V needs 2 × ranks)")
    ap.add_argument("--untied", action="store_true",
                    help="untie embedding and head in every case (ZB-V cannot tie them)")
    ap.add_argument("--clip-scope", default="", choices=["", "global", "stage"],
                    help="train.clip_scope for every case (ZB-V's two stages per rank clip "
                    "per stage)")
    ap.add_argument("--cases", nargs="+", default=["1f1b", "gpipe", "2bw", "2bw+ef"],
                    choices=list(CASES))
    ap.add_argument("--name", default="", help="results/async_cli_<name>.json instead of "
                    "async_cli_P<P>_m<m>.json")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load0 = os.getloadavg()
    rates: dict[str, list[float]] = {c: [] for c in args.cases}
    walls: dict[str, list[float]] = {c: [] for c in args.cases}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in args.cases:
                t0 = time.perf_counter()
                s = launch(name, args, Path(tmp) / f"{name}-{r}", env)
                walls[name].append(time.perf_counter() - t0)
                rates[name].append(s["steady_tokens_per_s"])
                print(f"round {r} {name}: {s['steady_tokens_per_s']:,.0f} tokens/s steady "
                      f"({s['tokens_per_s']:,.0f} wall average)", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    P, m = args.ranks, args.microbatches
    out = {"ranks": P, "microbatches": m, "batch": args.batch, "steps": args.steps,
           "layers": args.layers or None, "untied": args.untied, "cases": args.cases,
           "clip_scope": args.clip_scope or None,
           "rounds": args.rounds, "load_before": load0, "load_after": os.getloadavg(),
           "steady_tokens_per_s": rates, "median": med, "launch_wall_s": walls,
           "ideal_2bw_over_1f1b": (m + P - 1) / m}
    if "2bw" in med and "1f1b" in med:
        out["2bw_over_1f1b"] = med["2bw"] / med["1f1b"]
    if "2bw+ef" in med and "2bw" in med:
        out["2bw_ef_over_2bw"] = med["2bw+ef"] / med["2bw"]
    zb = {k: med[k] for k in ("zb-h1", "zb-v") if k in med}
    if zb and "2bw" in med:
        best = max(zb, key=zb.get)
        out["best_zero_bubble"] = best
        out["2bw_over_best_zero_bubble"] = med["2bw"] / zb[best]
    print(render(out))
    if not args.no_save:
        name = f"async_cli_{args.name}" if args.name else f"async_cli_P{P}_m{m}"
        print("wrote", save(name, out))
        write_readme_block(name, render(json.loads(
            (Path(os.environ.get("ASYNCPP_BENCH_RESULTS") or ROOT / "benchmarks" / "results")
             / f"{name}.json").read_text())))
    return out


if __name__ == "__main__":
    main()
