"""One rank of the pipeline benchmarks (3: throughput, 4: weight-version memory).

Started by :func:`launch` the way ``torchrun`` starts ranks (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT); rank 0 writes ``OUTDIR/result.json``. Stage work has a *fixed duration*: every
forward sleeps ``t_f`` and every backward ``t_b`` (a custom autograd Function) on tiny tensors,
so the measured makespan is the schedule's, not the 2 shared cores'.

    python benchmarks/pipeline_ranks.py throughput OUTDIR '{"P": 2, ...}'
    python benchmarks/pipeline_ranks.py memory OUTDIR '{"P": 4, ...}'
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from asyncpp.pipeline.launch import RankTimeout, run_ranks

HERE = Path(__file__).resolve().parent


class _Sleep(torch.autograd.Function):
    """Identity whose forward sleeps ``t_f`` s and whose backward sleeps ``t_b`` s."""

    @staticmethod
    def forward(ctx, x, t_f, t_b, log):
        ctx.t_b, ctx.log = t_b, log
        t0 = time.perf_counter()
        time.sleep(t_f)
        log["F"].append(time.perf_counter() - t0)
        if log.get("hook"):
            log["hook"]()
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        t0 = time.perf_counter()
        time.sleep(ctx.t_b)
        ctx.log["B"].append(time.perf_counter() - t0)
        if ctx.log.get("hook"):
            ctx.log["hook"]()
        return g, None, None, None


class SleepStage(nn.Module):
    """``Linear(d, d)`` followed by a fixed-duration identity (forward t_f, backward t_b)."""

    def __init__(self, d: int, t_f: float, t_b: float, log: dict | None = None):
        super().__init__()
        self.lin = nn.Linear(d, d, bias=False)
        self.t_f, self.t_b = t_f, t_b
        self.log = log if log is not None else {"F": [], "B": []}

    def forward(self, x):
        return _Sleep.apply(self.lin(x), self.t_f, self.t_b, self.log)




def launch(scenario: str, nprocs: int, outdir: Path, params: dict,
           deadline: float = 300.0) -> dict:
    """Start ``nprocs`` ranks of this file, wait at most ``deadline`` s, return rank 0's JSON."""
    try:
        run_ranks([sys.executable, str(HERE / "pipeline_ranks.py"), scenario, str(outdir),
                   json.dumps(params)], nprocs, outdir, deadline=deadline)
    except RankTimeout as e:
        raise RuntimeError(f"{scenario}: {e}") from None
    path = outdir / "result.json"
    if not path.exists():
        tail = (outdir / "log0.txt").read_text()[-3000:]
        for r in range(1, nprocs):
            tail += f"\n--- rank {r}\n" + (outdir / f"log{r}.txt").read_text()[-1500:]
        raise RuntimeError(f"{scenario}: rank 0 wrote no result; logs end with:\n{tail}")
    return json.loads(path.read_text())


# -- inside a rank ------------------------------------------------------------------------------


def _executor(schedule: str, P: int, m: int, topo, stage: nn.Module, lr: float = 1e-3):
    from asyncpp.delay import DelayedOptimizer
    from asyncpp.pipeline import ExecutorOptions, PipelineExecutor, stage_delay

    opt = torch.optim.SGD(stage.parameters(), lr=lr)
    dopt = DelayedOptimizer(opt, delay=stage_delay(schedule, P, topo.stage))
    return PipelineExecutor(stage, dopt, schedule=schedule, num_microbatches=m, topology=topo,
                            loss_fn=nn.functional.mse_loss, options=ExecutorOptions(timeout=120))


def _batches(n: int, rows: int, d: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(rows, d, generator=g, dtype=dtype),
             torch.randn(rows, d, generator=g, dtype=dtype)) for _ in range(n)]


def _comm_latency(topo, rounds: int = 50) -> float:
    """One-way latency of a tiny P2P message stage 0 → 1 (half the median round trip)."""
    x = torch.zeros(8)
    rts = []
    s = topo.stage
    if s > 1:
        return 0.0
    peer = topo.stage_ranks[1 - s]
    for _ in range(rounds):
        t0 = time.perf_counter()
        if s == 0:
            dist.send(x, peer)
            dist.recv(x, peer)
        else:
            dist.recv(x, peer)
            dist.send(x, peer)
        rts.append(time.perf_counter() - t0)
    rts.sort()
    return rts[len(rts) // 2] / 2


def _instrument(ex, acc: dict) -> None:
    """Time the executor's compute actions (forward, backward, update) into ``acc``."""
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


def throughput(P: int, ms: list[int], schedules: list[str], t_f: float, t_b: float,
               steps: tuple[int, int], repeats: int, rows_per_mb: int, d: int) -> dict:
    """Per (schedule, m): wall time of ``train_steps`` over steps[0] and steps[1] batches,
    ``repeats`` times interleaved; also the measured P2P latency, and per stage the mean
    duration of each compute action as the executor runs it (sleep + executor overhead)."""
    from asyncpp.pipeline import PipelineTopology

    topo = PipelineTopology.create(num_stages=P, timeout=120)
    t_comm = _comm_latency(topo)
    out: dict = {"t_comm": t_comm, "cases": {}, "actions": {}}
    log: dict = {"F": [], "B": []}
    exes, accs = {}, {}
    for m in ms:
        for name in schedules:
            torch.manual_seed(0)
            stage = SleepStage(d, t_f, t_b, log)
            ex = _executor(name, P, m, topo, stage)
            ex.train_steps(_batches(1, m * rows_per_mb, d))  # warm-up
            accs[(name, m)] = {"F": [], "B": [], "U": []}
            _instrument(ex, accs[(name, m)])
            exes[(name, m)] = ex
    log["F"].clear()
    log["B"].clear()
    prof = None
    spec = os.environ.get("ASYNCPP_BENCH_PROFILE", "")  # "STAGE:PATH": cProfile that stage
    if spec and topo.stage == int(spec.split(":", 1)[0]):
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    for _ in range(repeats):
        for (name, m), ex in exes.items():
            for n in steps:
                batches = _batches(n, m * rows_per_mb, d)
                dist.barrier(group=topo.world_group)
                t0 = time.perf_counter()
                ex.train_steps(batches)   # ends with a loss all-reduce over all ranks
                dt = time.perf_counter() - t0
                out["cases"].setdefault(f"{name}|{m}|{n}", []).append(dt)
    if prof is not None:
        import io
        import pstats

        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
        Path(spec.split(":", 1)[1]).write_text(buf.getvalue())

    def gather(vals: list[float]) -> list[list[float]]:
        mine = torch.tensor(vals, dtype=torch.float64)
        allv = [torch.zeros_like(mine) for _ in range(P)]
        dist.all_gather(allv, mine, group=topo.world_group)
        return [[float(x) for x in v] for v in allv]

    def mean(xs):
        return sum(xs) / len(xs) if xs else 0.0

    for (name, m), acc in accs.items():
        # An update is timed in two parts (its launch, its deferred application): their sum.
        per_stage = gather([mean(acc["F"]), mean(acc["B"]), 2 * mean(acc["U"])])
        out["actions"][f"{name}|{m}"] = {k: [v[i] for v in per_stage]
                                         for i, k in enumerate("FBU")}
    # Mean measured sleep per action (≥ nominal: wake-up latency under load).
    per_stage = gather([mean(log["F"]), mean(log["B"])])
    out["t_f_measured"] = [v[0] for v in per_stage]
    out["t_b_measured"] = [v[1] for v in per_stage]
    return out


def _storage_bytes(versions: dict) -> int:
    seen, total = set(), 0
    for tensors in versions.values():
        for t in tensors.values():
            st = t.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                total += st.nbytes()
    return total


def memory(P: int, m: int, schedules: list[str], d: int, steps: int) -> dict:
    """Per schedule and stage: peak bytes of distinct storages held by the executor's live
    weight versions (sampled at every forward and backward), and the most versions alive."""
    from asyncpp.pipeline import PipelineTopology

    topo = PipelineTopology.create(num_stages=P, timeout=120)
    out = {}
    for name in schedules:
        torch.manual_seed(0)
        stage = SleepStage(d, 0.0, 0.0)
        ex = _executor(name, P, m, topo, stage)
        peak = {"bytes": 0, "versions": 0}

        def sample(ex=ex, peak=peak):
            peak["bytes"] = max(peak["bytes"], _storage_bytes(ex._versions))
            peak["versions"] = max(peak["versions"], len(ex._versions))

        stage.log["hook"] = sample
        ex.train_steps(_batches(steps, m, d))
        mine = torch.tensor([peak["bytes"], peak["versions"]], dtype=torch.float64)
        allv = [torch.zeros(2, dtype=torch.float64) for _ in range(P)]
        dist.all_gather(allv, mine, group=topo.world_group)
        params = sum(p.numel() * p.element_size() for p in stage.parameters())
        out[name] = {"peak_bytes": [int(v[0]) for v in allv],
                     "peak_versions": [int(v[1]) for v in allv],
                     "param_bytes_per_stage": params}
    return out


def main() -> None:
    scenario, outdir, params = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
    from asyncpp.pipeline import init_distributed

    init_distributed("cpu", timeout=120)
    torch.set_num_threads(1)
    if scenario == "throughput":
        res = throughput(**params)
    elif scenario == "memory":
        res = memory(**params)
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    if dist.get_rank() == 0:
        tmp = outdir / "result.json.tmp"
        tmp.write_text(json.dumps(res))
        os.replace(tmp, outdir / "result.json")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
