"""Multi-process checks (gloo, float64) of the Nesterov delay correction and of the WPipe
schedule against the single-process delay core; helpers shared with ``pipeline_worker.py``.

    torchrun --standalone --nproc-per-node=4 tests/extras_worker.py nesterov OUTDIR
    torchrun --standalone --nproc-per-node=4 tests/extras_worker.py wpipe OUTDIR

Every rank writes ``OUTDIR/rank{r}.json`` (same fields as ``pipeline_worker.py``).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_worker import (  # noqa: E402
    ADAMW,
    MUON,
    boundaries,
    check,
    data,
    deviation,
    make_executor,
    mlp_layers,
    mse,
    simulate,
)

from asyncpp.delay import DelayedOptimizer  # noqa: E402
from asyncpp.optim import Muon  # noqa: E402
from asyncpp.pipeline import (  # noqa: E402
    PipelineTopology,
    StageModule,
    build_stages,
    init_distributed,
    stage_delay,
)


def simulate_per_stage_delays(layers_fn, P, schedule, optname, hp, xs, ys, loss_fn,
                              correction="none"):
    """The whole model in one process, one parameter group per stage (Muon: two) with the
    stage's delay τ_s of ``schedule`` (WPipe: 1 for the first half, 0 for the second), one
    update per step; returns (losses, weights before flush, weights after flush)."""
    layers = layers_fn(P)
    model = StageModule(layers)
    stages = build_stages(layers, P, boundaries=boundaries(len(layers), P))
    groups, delays = [], []
    for s, st in enumerate(stages):
        params = list(st.parameters())
        tau = stage_delay(schedule, P, s)
        if optname == "muon":
            groups += [{"params": [p for p in params if p.ndim == 2], "use_muon": True},
                       {"params": [p for p in params if p.ndim != 2], "use_muon": False}]
            delays += [tau, tau]
        else:
            groups.append({"params": params})
            delays.append(tau)
    opt = Muon(groups, **hp) if optname == "muon" else torch.optim.AdamW(groups, **hp)
    dopt = DelayedOptimizer(opt, delay=delays, correction=correction)
    losses = []
    for x, y in zip(xs, ys):
        loss = loss_fn(model(x), y)
        loss.backward()
        dopt.step()
        dopt.zero_grad()
        losses.append(loss.item())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    dopt.flush()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    return losses, before, after, delays


def check_wpipe(topo, name, optname, hp, m, correction="none"):
    """WPipe through the executor against the delay core with the delays WPipe realises."""
    P = topo.num_stages
    xs, ys = data("mlp", 12 * topo.dp_size)  # 12 rows: m = 3 and m = 4 split it evenly
    *sim, delays = simulate_per_stage_delays(mlp_layers, P, "wpipe", optname, hp, xs, ys, mse,
                                             correction)
    ex = make_executor(topo, mlp_layers, "wpipe", optname, hp, m, mse, correction=correction)
    out = deviation(ex, tuple(sim), xs=xs, ys=ys)
    out["delays"] = delays
    # Negative controls: neither 2BW's uniform delay 1 nor synchronous training matches.
    _, _, bw = simulate(mlp_layers, P, "2bw", optname, hp, m, xs, ys, mse,
                        correction=correction)
    _, _, sync = simulate(mlp_layers, P, "gpipe", optname, hp, m, xs, ys, mse)
    mine = {n: p.detach() for n, p in ex.stage.named_parameters()}
    out["control"] = max(float((p - sync[n]).abs().max()) for n, p in mine.items())
    out["control_2bw"] = max(float((p - bw[n]).abs().max()) for n, p in mine.items())
    return name, out


def scenario_nesterov(results):
    """P = 4: the Nesterov look-ahead through the executor equals the delay core, with one
    delay (2BW, τ = 1) and per-stage delays (PipeDream, τ_s = 3 − s)."""
    topo = PipelineTopology.create(4, timeout=60)
    for name, schedule, optname, hp in [("2bw_adamw", "2bw", "adamw", ADAMW),
                                        ("2bw_muon", "2bw", "muon", MUON),
                                        ("pipedream_adamw", "pipedream", "adamw", ADAMW),
                                        ("pipedream_muon", "pipedream", "muon", MUON)]:
        key, out = check(topo, f"P4_{name}_nesterov", mlp_layers, schedule, optname, hp, 4, mse,
                         correction="nesterov")
        results[key] = out


def scenario_wpipe(results):
    """P = 4 partitions (two devices' worth, one rank each): G0 = {0, 1} with τ = 1, G1 =
    {2, 3} with τ = 0; AdamW and Muon, with and without the EF and Nesterov corrections."""
    topo = PipelineTopology.create(4, timeout=60)
    for name, optname, hp, corr in [("adamw", "adamw", ADAMW, "none"),
                                    ("muon", "muon", MUON, "none"),
                                    ("muon_ef", "muon", MUON, "ef"),
                                    ("adamw_nesterov", "adamw", ADAMW, "nesterov")]:
        for m in (3, 4):
            key, out = check_wpipe(topo, f"P4_wpipe_{name}_m{m}", optname, hp, m, corr)
            results[key] = out


SCENARIOS = {"nesterov": scenario_nesterov, "wpipe": scenario_wpipe}


def main() -> None:
    scenario, outdir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    init_distributed("cpu", timeout=120)
    rank = dist.get_rank()
    results: dict = {}
    t0 = time.time()
    code = 0
    try:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; use one of {sorted(SCENARIOS)}")
        SCENARIOS[scenario](results)
    except Exception:
        results["crash"] = traceback.format_exc()
        code = 1
    results["wall_s"] = time.time() - t0
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    if code:
        os._exit(code)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
