"""asyncpp's pipeline schedules against torch.distributed.pipelining's, on the same model, in
one run: 2 ranks (gloo, one intra-op thread each), interleaved rounds, medians and ranges.

Models (the same weights, data and AdamW for every schedule):

* ``mlp``: 8 × (Linear(D, D) + tanh), D = 768, 64 rows per microbatch, MSE loss;
* ``demo``: the transformer of ``configs/demo.toml`` (``small``: 4 layers, d = 256, vocab 4096,
  embedding and head untied so that torch's stages own disjoint weights), next-token loss,
  ``--demo-rows`` sequences of ``--demo-seq`` tokens per microbatch.

Placements: asyncpp and torch ``Schedule1F1B`` put half the model on each rank; torch's looped
schedules (``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``) cut it into 4 stages,
rank r holding stages r and r + 2, and ``ScheduleZBVZeroBubble`` into the V (rank 0: stages 0
and 3, rank 1: stages 1 and 2). asyncpp's ``PipelineExecutor`` is called once per measurement
over all its steps (streaming: one fill and one drain per call); torch runs ``schedule.step``,
then ``AdamW.step`` and ``zero_grad`` per step. A measurement is ``--steps`` steps after a
warm-up call; per round every schedule is measured once, the order rotated each round.

Same run, same ranks, per stage: ``t_f`` and ``t_b`` (one microbatch's forward and backward),
``t_bi`` (the backward to the input only, for the zero-bubble split), ``t_upd`` (AdamW's step
over the stage) and ``t_msg`` (half a round trip of one activation). The bubble-free target for
a schedule with no flush that counts the update as work is

.. math::
    \\text{ideal} = \\frac{(m + P - 1)\\,t_{mb} + t_{upd}}{m\\,t_{mb} + t_{upd}}
    \\times \\text{torch Schedule1F1B}, \\qquad t_{mb} = t_f + t_b

(with the slower stage's ``t_mb`` and ``t_upd``).

    .venv/bin/python benchmarks/peer_torch.py            # full run, results/peer_torch.json
    .venv/bin/python benchmarks/peer_torch.py --render   # README table from the JSON only
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
P = 2
ASYNCPP = ("1f1b", "zb-h1", "zb-v@v", "2bw", "pipedream", "1f1b@looped", "2bw@looped")
TORCH = ("Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble",
         "ScheduleZBVZeroBubble")
BASE = "torch:Schedule1F1B"


# -- models ----------------------------------------------------------------------------------
def _mlp_layers(d: int, n: int = 8):
    import torch
    from torch import nn

    torch.manual_seed(0)
    return [(f"layers.{i}", nn.Sequential(nn.Linear(d, d), nn.Tanh())) for i in range(n)]


def _demo_model(name: str):
    from asyncpp.models import build_model
    from asyncpp.models.config import MODEL_CONFIGS

    mc = dataclasses.replace(MODEL_CONFIGS[name], tie_embeddings=False)
    model = build_model(mc, device="cpu")
    model.init_weights(0)
    return model


class Workload:
    """Layers, stage cuts, data and loss of one model (built afresh, same seed, per use)."""

    def __init__(self, name: str, args: dict):
        self.name = name
        self.args = args
        if name == "mlp":
            self.n = 8
        else:
            from asyncpp.models.config import MODEL_CONFIGS

            self.n = MODEL_CONFIGS[args["demo_model"]].n_layers

    def layers(self):
        if self.name == "mlp":
            return _mlp_layers(self.args["dim"])
        return _demo_model(self.args["demo_model"]).pipeline_layers()

    def boundaries(self, stages: int) -> list[int]:
        if self.name == "mlp":
            return [self.n * k // stages for k in range(stages + 1)]
        from asyncpp.models import pipeline_boundaries

        return pipeline_boundaries(self.n, stages)

    def stage(self, s: int, stages: int):
        from asyncpp.pipeline import build_stage

        return build_stage(self.layers(), s, stages, boundaries=self.boundaries(stages))

    def batch(self, m: int):
        """One step's (inputs, targets): the same tensors every step (speed, not learning)."""
        import torch

        g = torch.Generator().manual_seed(1)
        if self.name == "mlp":
            rows = 64 * m
            d = self.args["dim"]
            return torch.randn(rows, d, generator=g), torch.randn(rows, d, generator=g)
        from asyncpp.models.config import MODEL_CONFIGS

        v = MODEL_CONFIGS[self.args["demo_model"]].vocab_size
        shape = (self.args["demo_rows"] * m, self.args["demo_seq"])
        return (torch.randint(0, v, shape, generator=g), torch.randint(0, v, shape, generator=g))

    def loss(self, out, target):
        import torch.nn.functional as F

        if self.name == "mlp":
            return F.mse_loss(out, target)
        return F.cross_entropy(out.float().reshape(-1, out.shape[-1]), target.reshape(-1))


# -- the rank's work ---------------------------------------------------------------------------
def _median_time(fn, n: int, clock=time.perf_counter) -> float:
    ts = []
    for _ in range(n):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return statistics.median(ts)


def measure_costs(w: Workload, rank: int, topo, repeats: int) -> dict:
    """This rank's stage (of the 2-rank cut): t_f, t_b, t_bi, t_upd as the CPU time of this
    rank's one thread (the work, whatever else the shared machine runs), each the median over
    ``repeats``; t_msg (wall clock, collective) half a round trip of one activation."""
    import torch
    import torch.distributed as dist

    clock = time.thread_time
    stage = w.stage(rank, P)
    x, y = w.batch(1)
    opt = torch.optim.AdamW(stage.parameters(), lr=1e-4)
    if rank == 0:
        inp = x
    else:  # the activation stage 0 sends
        with torch.no_grad():
            inp = w.stage(0, P)(x)
    last = rank == P - 1
    needs_input_grad = inp.is_floating_point()
    samples = {"t_f": [], "t_b": [], "t_bi": []}

    def once(input_only: bool) -> None:
        i = inp.detach().requires_grad_(needs_input_grad)
        t0 = clock()
        out = stage(i)
        out = w.loss(out, y) if last else out
        t1 = clock()
        g = None if last else torch.ones_like(out)
        if input_only:
            torch.autograd.grad(out, [i], g)
        else:
            out.backward(g)
        t2 = clock()
        samples["t_f"].append(t1 - t0)
        samples["t_bi" if input_only else "t_b"].append(t2 - t1)

    once(False)
    samples["t_f"].clear()
    samples["t_b"].clear()
    for _ in range(repeats):
        once(False)
        if needs_input_grad:
            once(True)
    t_upd = _median_time(opt.step, repeats, clock)
    # Half a round trip of one activation (stage 0's output) between the two ranks.
    with torch.no_grad():
        act = (w.stage(0, P)(x) if rank == 0 else inp).contiguous()
    peer = 1 - rank

    def ping():
        if rank == 0:
            dist.send(act, peer)
            dist.recv(act, peer)
        else:
            dist.recv(act, peer)
            dist.send(act, peer)

    ping()
    t_msg = _median_time(ping, repeats) / 2
    med = {k: statistics.median(v) if v else None for k, v in samples.items()}
    return {**med, "t_upd": t_upd, "t_msg": t_msg,
            "activation_bytes": act.numel() * act.element_size(),
            "stage_params": sum(p.numel() for p in stage.parameters())}


def asyncpp_runner(w: Workload, name: str, m: int, topo, rank: int):
    """asyncpp's executor; ``name@looped``: 2P stages, rank r running stages r and r + P (the
    looped placement of interleaved schedules, as torch's ``ScheduleInterleaved1F1B``);
    ``name@v``: 2P stages in a V, rank r running stages r and 2P − 1 − r (ZB-V, as torch's
    ``ScheduleZBVZeroBubble``)."""
    import inspect

    import torch

    from asyncpp.delay import DelayedOptimizer
    from asyncpp.pipeline import PipelineExecutor

    try:
        from asyncpp.pipeline import stage_delay
    except ImportError:  # older layout
        from asyncpp.pipeline.executor import stage_delay
    try:
        from asyncpp.pipeline import ExecutorOptions
    except ImportError:  # older layout: the options were keywords of the executor
        ExecutorOptions = None
    sched, _, where = name.partition("@")
    kw = dict(schedule=sched, num_microbatches=m, topology=topo, loss_fn=w.loss)
    options = {"timeout": 600}
    if ExecutorOptions is not None \
            or "track_grad_norm" in inspect.signature(PipelineExecutor).parameters:
        options["track_grad_norm"] = False  # nothing reads it here (torch computes none either)
    if ExecutorOptions is not None:
        kw["options"] = ExecutorOptions(**options)
    else:
        kw.update(options)
    if where in ("looped", "v"):
        n = 2 * P
        placement = [[r, r + P] if where == "looped" else [r, n - 1 - r] for r in range(P)]
        mods = {s: w.stage(s, n) for s in placement[rank]}
        opts = {s: DelayedOptimizer(torch.optim.AdamW(mod.parameters(), lr=1e-4),
                                    delay=stage_delay(sched, n, s)) for s, mod in mods.items()}
        ex = PipelineExecutor(mods, opts, placement=placement, **kw)
    else:
        stage = w.stage(rank, P)
        dopt = DelayedOptimizer(torch.optim.AdamW(stage.parameters(), lr=1e-4),
                                delay=stage_delay(sched, P, rank))
        ex = PipelineExecutor(stage, dopt, **kw)
    batch = w.batch(m)

    def run(steps: int) -> None:
        for _ in ex.run_steps(itertools.repeat(batch), steps):
            pass

    return run


def torch_runner(w: Workload, name: str, m: int, topo, rank: int):
    import torch
    from torch.distributed import pipelining as pp

    if name == "Schedule1F1B":
        ids, n = [rank], P
    elif name == "ScheduleZBVZeroBubble":
        ids, n = [rank, 2 * P - 1 - rank], 2 * P
    else:
        ids, n = [rank, rank + P], 2 * P
    mods = [w.stage(s, n) for s in ids]
    stages = [pp.PipelineStage(mod, s, n, torch.device("cpu"), group=topo.pp_group)
              for mod, s in zip(mods, ids)]
    cls = getattr(pp, name)
    sched = cls(stages[0] if len(stages) == 1 else stages, n_microbatches=m, loss_fn=w.loss)
    opt = torch.optim.AdamW([p for mod in mods for p in mod.parameters()], lr=1e-4)
    x, y = w.batch(m)
    first, last = 0 in ids, n - 1 in ids

    def run(steps: int) -> None:
        for _ in range(steps):
            args = (x,) if first else ()
            kw = {"target": y, "losses": []} if last else {}
            sched.step(*args, return_outputs=False, **kw)
            opt.step()
            opt.zero_grad(set_to_none=True)

    return run


def worker(outdir: str, params: dict) -> None:
    import torch
    import torch.distributed as dist

    from asyncpp.pipeline import PipelineTopology, init_distributed

    torch.set_num_threads(1)
    init_distributed("cpu", timeout=900)
    rank = dist.get_rank()
    topo = PipelineTopology.create(P, timeout=900)
    out = {"costs": {}, "times": {}, "cpu": {}, "skipped": {}}
    names = [f"asyncpp:{s}" for s in params["asyncpp"]] + [f"torch:{s}" for s in params["torch"]]
    for model in params["models"]:
        w = Workload(model, params)
        costs = measure_costs(w, rank, topo, params["cost_repeats"])
        everyone = [None] * P
        dist.all_gather_object(everyone, costs)
        out["costs"][model] = everyone
        steps = params["steps"][model]
        for m in params["ms"]:
            runners = {}
            for name in names:
                lib, sched = name.split(":")
                make = asyncpp_runner if lib == "asyncpp" else torch_runner
                try:  # refusals come before any message, alike on every rank
                    runners[name] = make(w, sched, m, topo, rank)
                    runners[name](params["warmup"])
                except ValueError as e:  # e.g. a schedule that does not run at this m
                    out["skipped"][f"{model}/m{m}/{name}"] = str(e).splitlines()[0][:200]
                    runners.pop(name, None)
                    continue
            cell = {name: [] for name in runners}
            cpu = {name: [] for name in runners}
            order = list(runners)
            for r in range(params["rounds"]):
                k = r % len(order)
                for name in order[k:] + order[:k]:
                    dist.barrier()
                    t0, c0 = time.perf_counter(), time.process_time()
                    runners[name](steps)
                    c1 = time.process_time()
                    dist.barrier()
                    cell[name].append((time.perf_counter() - t0) / steps)
                    cpu[name].append((c1 - c0) / steps)
            out["times"][f"{model}/m{m}"] = cell
            everyone = [None] * P
            dist.all_gather_object(everyone, cpu)
            out["cpu"][f"{model}/m{m}"] = everyone
            del runners
    if rank == 0:
        Path(outdir, "result.json").write_text(json.dumps(out))
    dist.destroy_process_group()


# -- the driver ------------------------------------------------------------------------------
def ideal_ratio(m: int, t_mb: float, t_upd: float, stages: int = P) -> float:
    """((m + P − 1)·t_mb + t_upd) / (m·t_mb + t_upd): a flush-free schedule's step over
    1F1B's, when both count the update as work."""
    return ((m + stages - 1) * t_mb + t_upd) / (m * t_mb + t_upd)


def summarize(raw: dict, params: dict) -> dict:
    """Steps/s per schedule (median and range over rounds) and per-round ratios to torch's
    Schedule1F1B (median and range), with the costs and the 2BW target per cell."""
    cells = {}
    for key, cell in raw["times"].items():
        model, mtag = key.split("/")
        m = int(mtag[1:])
        costs = raw["costs"][model]
        t_mb = max(c["t_f"] + c["t_b"] for c in costs)
        t_upd = max(c["t_upd"] for c in costs)
        ideal = ideal_ratio(m, t_mb, t_upd)
        rows = {}
        cpu = raw.get("cpu", {}).get(key)
        for name, ts in cell.items():
            rate = [1.0 / t for t in ts]
            ratio = [b / t for b, t in zip(cell[BASE], ts)] if BASE in cell else []
            rows[name] = {
                "step_s": {"median": statistics.median(ts), "min": min(ts), "max": max(ts)},
                "steps_per_s_median": statistics.median(rate),
                "ratio_vs_torch_1f1b": ({"median": statistics.median(ratio), "min": min(ratio),
                                         "max": max(ratio),
                                         # the least disturbed rounds: interference only adds
                                         "best": min(cell[BASE]) / min(ts)} if ratio else None),
                # CPU seconds per step on each rank (process time): the work plus the
                # runtime's own overhead, without the waits
                "cpu_s_per_step": ([statistics.median(c[name]) for c in cpu] if cpu else None)}
        cells[key] = {"model": model, "m": m, "t_mb": t_mb, "t_upd": t_upd,
                      "ideal_2bw_vs_torch_1f1b": ideal, "target_2bw": 0.9 * ideal,
                      "schedules": rows}
    return cells


def _fmt(r: dict | None) -> str:
    if r is None:
        return "—"
    return f"{r['median']:.2f} ({r['min']:.2f}–{r['max']:.2f}; best {r['best']:.2f})"


def render(result: dict) -> str:
    """The README block: one table per model (ratios to torch Schedule1F1B, median and range
    over rounds), the costs, the machine and the run."""
    names = result["params"]["names"]
    short = {n: n.replace("asyncpp:", "asyncpp ").replace("torch:Schedule", "torch ")
             for n in names}
    out = []
    meta = result["run"]
    out.append(f"Run of {meta['date']} (commit `{meta['commit']}`), torch {meta['torch']}, "
               f"{result['params']['rounds']} rounds; steps per measurement: "
               + ", ".join(f"{k} {v}" for k, v in result["params"]["steps"].items())
               + f"; it took {meta['duration_s']:.0f} s. Load (`uptime`) at the start: "
               f"{meta['load_start']}; at the end: {meta['load_end']}.")
    out.append("")
    for model in result["params"]["models"]:
        keys = [k for k, c in result["cells"].items() if c["model"] == model]
        c0 = result["costs"][model]
        out.append(f"**{model}** — steps/s relative to torch `Schedule1F1B`: median (range) of "
                   "the per-round ratios; best = ratio of the fastest rounds. Per stage (rank 0 "
                   "/ rank 1, CPU time) t_f = "
                   + " / ".join(f"{c['t_f'] * 1e3:.1f}" for c in c0) + " ms, t_b = "
                   + " / ".join(f"{c['t_b'] * 1e3:.1f}" for c in c0) + " ms, t_upd = "
                   + " / ".join(f"{c['t_upd'] * 1e3:.1f}" for c in c0) + " ms, t_msg = "
                   + " / ".join(f"{c['t_msg'] * 1e3:.2f}" for c in c0) + " ms.")
        out.append("")
        head = ["m", "torch 1F1B step (ms)", "ideal 2bw", "target 2bw (0.9 × ideal)"] + \
            [short[n] for n in names if n != BASE]
        out.append("| " + " | ".join(head) + " |")
        out.append("| " + " | ".join("---" for _ in head) + " |")
        for k in sorted(keys, key=lambda k: result["cells"][k]["m"]):
            c = result["cells"][k]
            base = c["schedules"].get(BASE)
            row = [str(c["m"]), f"{base['step_s']['median'] * 1e3:.0f}" if base else "—",
                   f"{c['ideal_2bw_vs_torch_1f1b']:.2f}", f"{c['target_2bw']:.2f}"]
            for n in names:
                if n == BASE:
                    continue
                s = c["schedules"].get(n)
                row.append(_fmt(s["ratio_vs_torch_1f1b"]) if s else "—")
            out.append("| " + " | ".join(row) + " |")
        out.append("")
        cpu_rows = [(result["cells"][k]["m"], result["cells"][k]["schedules"]) for k in keys]
        if all(v.get("cpu_s_per_step") for _, sc in cpu_rows for v in sc.values()):
            out.append("CPU ms per step, rank 0 / rank 1 (median; the work and the runtime's "
                       "overhead, not the waits):")
            out.append("")
            out.append("| m | " + " | ".join(short[n] for n in names) + " |")
            out.append("| --- | " + " | ".join("---" for _ in names) + " |")
            for m, sc in sorted(cpu_rows, key=lambda t: t[0]):
                out.append(f"| {m} | " + " | ".join(
                    " / ".join(f"{1e3 * x:.0f}" for x in sc[n]["cpu_s_per_step"])
                    if n in sc else "—" for n in names) + " |")
            out.append("")
    for key, why in sorted(result.get("skipped", {}).items()):
        out.append(f"- not run: {key}: {why}")
    return "\n".join(out).rstrip() + "\n"


def render_page(result: dict) -> str:
    """The book's version of :func:`render`, sized for a 700-px column: per model, one row per
    schedule and one column per microbatch count (median ratio to torch ``Schedule1F1B`` and
    its range over rounds), the ideal and the target per m, and the costs in math."""
    names = result["params"]["names"]
    label = {n: n.replace("asyncpp:", "asyncpp ").replace("torch:Schedule", "torch ")
             .replace("@looped", ", looped").replace("@v", ", V") for n in names}
    meta = result["run"]
    out = [f"Commit `{meta['commit']}`, torch {meta['torch']}, {result['params']['rounds']} "
           f"rounds in {meta['duration_s']:.0f} s; load (`uptime`) {meta['load_start']} at the "
           f"start, {meta['load_end']} at the end.", ""]
    for model in result["params"]["models"]:
        cells = sorted((c for c in result["cells"].values() if c["model"] == model),
                       key=lambda c: c["m"])
        ms = [c["m"] for c in cells]
        c0 = result["costs"][model]

        def ms_of(key, digits=1, c0=c0):
            return " / ".join(f"{c[key] * 1e3:.{digits}f}" for c in c0)

        out += [f"**{model}**: per stage (rank 0 / rank 1, CPU time) $t_f$ = {ms_of('t_f')} ms, "
                f"$t_b$ = {ms_of('t_b')} ms, $t_{{upd}}$ = {ms_of('t_upd')} ms, one message "
                f"{ms_of('t_msg', 2)} ms.", ""]
        out.append("| schedule | " + " | ".join(f"m = {m}" for m in ms) + " |")
        out.append("| --- |" + " --- |" * len(ms))
        for key, head in (("ideal_2bw_vs_torch_1f1b", "ideal 2bw"),
                          ("target_2bw", "target 2bw")):
            out.append(f"| {head} | " + " | ".join(f"{c[key]:.2f}" for c in cells) + " |")
        for n in names:
            if n == BASE:
                continue
            row = []
            for c in cells:
                r = c["schedules"].get(n, {}).get("ratio_vs_torch_1f1b")
                row.append("—" if r is None else
                           f"{r['median']:.2f} ({r['min']:.2f}–{r['max']:.2f})")
            out.append(f"| {label[n]} | " + " | ".join(row) + " |")
        out.append("")
    for key, why in sorted(result.get("skipped", {}).items()):
        out.append(f"- not run: {key}: " + why.replace(">=", "≥"))
    return "\n".join(out).rstrip() + "\n"


def write_readme(result: dict, readme: Path = HERE / "README.md") -> None:
    sys.path.insert(0, str(HERE))
    from bench_common import write_readme_block

    write_readme_block("peer_torch", render(result), str(readme))


def _results_dir() -> Path:
    return Path(os.environ.get("ASYNCPP_BENCH_RESULTS") or HERE / "results")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ms", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--models", nargs="+", default=["mlp", "demo"], choices=["mlp", "demo"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps-mlp", type=int, default=4)
    ap.add_argument("--steps-demo", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--demo-model", default="small")
    ap.add_argument("--demo-rows", type=int, default=2)
    ap.add_argument("--demo-seq", type=int, default=128)
    ap.add_argument("--cost-repeats", type=int, default=15)
    ap.add_argument("--asyncpp", nargs="+", default=list(ASYNCPP))
    ap.add_argument("--torch", nargs="+", default=list(TORCH), choices=list(TORCH))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one round (for tests)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the README table from results/peer_torch.json")
    ap.add_argument("--deadline", type=float, default=1200.0)
    a = ap.parse_args(argv)
    if a.render:
        result = json.loads((HERE / "results" / "peer_torch.json").read_text())
        write_readme(result)
        print(render(result))
        return result
    if a.smoke:
        a.ms, a.rounds, a.steps_mlp, a.steps_demo, a.warmup = [2], 1, 1, 1, 1
        a.dim, a.demo_model, a.demo_rows, a.demo_seq, a.cost_repeats = 32, "tiny", 1, 8, 2
    names = [f"asyncpp:{s}" for s in a.asyncpp] + [f"torch:{s}" for s in a.torch]
    params = {"ms": a.ms, "models": a.models, "rounds": a.rounds, "warmup": a.warmup,
              "steps": {"mlp": a.steps_mlp, "demo": a.steps_demo}, "dim": a.dim,
              "demo_model": a.demo_model, "demo_rows": a.demo_rows, "demo_seq": a.demo_seq,
              "cost_repeats": a.cost_repeats, "asyncpp": a.asyncpp, "torch": a.torch,
              "names": names}
    import torch

    from asyncpp.pipeline.launch import RankTimeout, log_tail, run_ranks

    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"asyncpp-peer-{os.getpid()}"
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    try:  # the ranks' logs and result live in tmp; their tails are in any error message
        try:
            codes = run_ranks([sys.executable, __file__, "worker", str(tmp), json.dumps(params)],
                              P, tmp, deadline=a.deadline, env=env)
        except RankTimeout as e:
            raise SystemExit(f"peer benchmark: {e}\n{log_tail(tmp, 0)}") from None
        if codes != [0] * P:
            raise SystemExit(f"peer benchmark: ranks exited {codes}\n{log_tail(tmp, 0)}\n"
                             f"{log_tail(tmp, 1)}")
        raw = json.loads((tmp / "result.json").read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    duration = time.perf_counter() - t0
    load_end = os.getloadavg()
    result = {
        "run": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "commit": _git("rev-parse", "--short", "HEAD")
                + ("+dirty" if _git("status", "--porcelain", "--", "src") else ""),
                "torch": torch.__version__, "duration_s": duration,
                "load_start": " ".join(f"{x:.2f}" for x in load_start),
                "load_end": " ".join(f"{x:.2f}" for x in load_end),
                "cpus": os.cpu_count()},
        "params": params, "costs": raw["costs"], "times": raw["times"], "cpu": raw["cpu"],
        "skipped": raw["skipped"],
        "cells": summarize(raw, params)}
    sys.path.insert(0, str(HERE))
    from bench_common import save

    path = save("peer_torch", result)
    print(render(result))
    print(f"wrote {path} ({duration:.0f} s)")
    if not a.smoke and not os.environ.get("ASYNCPP_BENCH_RESULTS"):
        write_readme(result)
    return result


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], json.loads(sys.argv[3]))
    else:
        main()
