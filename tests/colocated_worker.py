"""Several stages per rank (gloo, float64): WPipe's P partitions on P/2 ranks and looped 1F1B /
2BW (stage s on rank s mod R) through the executor, against the single-process delay core.

    torchrun --standalone --nproc-per-node=2 tests/colocated_worker.py main OUTDIR

Every rank writes ``OUTDIR/rank{r}.json``: per check, the largest deviation from the reference
of the weights the next step reads (``params_next``), of the newest weights
(``params_newest``) and of the losses, the steps run, the versions each of its stages holds,
and a negative control (the distance to a schedule with other delays).
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extras_worker import simulate_per_stage_delays  # noqa: E402
from pipeline_worker import ADAMW, MUON, boundaries, data, mlp_layers, mse, simulate  # noqa: E402

from asyncpp.delay import DelayedOptimizer  # noqa: E402
from asyncpp.optim import build_optimizer  # noqa: E402
from asyncpp.pipeline import (  # noqa: E402
    ExecutorOptions,
    PipelineExecutor,
    PipelineTopology,
    build,
    build_stages,
    default_devices,
    init_distributed,
    looped_devices,
    stage_delay,
)


def make(topo, schedule, P, placement, optname, hp, m, correction="none", clip=None):
    mine = placement[topo.stage]
    layers = mlp_layers(P)
    mods = build_stages(layers, P, boundaries=boundaries(len(layers), P), stages=mine)
    stages = dict(zip(mine, mods))
    opts = {s: DelayedOptimizer(build_optimizer(optname, mod.named_parameters(), **hp),
                                delay=stage_delay(schedule, P, s), correction=correction)
            for s, mod in stages.items()}
    return PipelineExecutor(stages, opts, schedule=schedule, num_microbatches=m, topology=topo,
                            loss_fn=mse, placement=placement,
                            options=ExecutorOptions(timeout=60, max_grad_norm=clip,
                                                    clip_scope="stage"))


def compare(ex, ref, xs, ys, control, chunks=(4,)):
    losses_ref, before, after = ref
    batches = list(zip(xs, ys))
    losses, start = [], 0
    for c in [*chunks, len(batches)]:
        losses += ex.train_steps(batches[start:c])
        start = c
    out = {"params_next": 0.0, "params_newest": 0.0, "control": 0.0, "versions": {}}
    for s, ctx in ex.contexts.items():
        nxt = ex.weights(stage=s)
        newest = {n: p.detach() for n, p in ctx.module.named_parameters()}
        out["params_next"] = max(out["params_next"],
                                 max(float((nxt[n] - before[n]).abs().max()) for n in nxt))
        out["params_newest"] = max(out["params_newest"], max(
            float((p - after[n]).abs().max()) for n, p in newest.items()))
        out["control"] = max(out["control"], max(
            float((p - control[n]).abs().max()) for n, p in newest.items()))
        out["versions"][s] = ex.live_versions(stage=s)
    out["loss"] = max(abs(a - b) for a, b in zip(losses, losses_ref))
    out["steps"] = len(losses)
    return out


def check_wpipe(topo, name, optname, hp, m, correction="none"):
    P = 2 * topo.num_stages
    placement = default_devices(build("wpipe", P, m))
    xs, ys = data("mlp", 12)
    *ref, delays = simulate_per_stage_delays(mlp_layers, P, "wpipe", optname, hp, xs, ys, mse,
                                             correction)
    _, _, bw = simulate(mlp_layers, P, "2bw", optname, hp, m, xs, ys, mse, correction=correction)
    ex = make(topo, "wpipe", P, placement, optname, hp, m, correction)
    out = compare(ex, tuple(ref), xs, ys, bw)
    out["delays"], out["placement"] = delays, placement
    return name, out


def check_looped(topo, name, schedule, optname, hp, m, correction="none"):
    P = 2 * topo.num_stages
    placement = looped_devices(P, topo.num_stages)
    xs, ys = data("mlp", 12)
    ref = simulate(mlp_layers, P, schedule, optname, hp, m, xs, ys, mse, correction=correction)
    other = "gpipe" if schedule == "2bw" else "2bw"
    _, _, control = simulate(mlp_layers, P, other, optname, hp, m, xs, ys, mse)
    ex = make(topo, schedule, P, placement, optname, hp, m, correction)
    out = compare(ex, ref, xs, ys, control)
    out["placement"] = placement
    return name, out


def check_evaluate_and_resume(topo):
    """WPipe co-located: evaluate equals the reference forward; a checkpoint taken after 5
    steps and loaded into a fresh executor continues bit for bit."""
    P, m = 2 * topo.num_stages, 3
    placement = default_devices(build("wpipe", P, m))
    xs, ys = data("mlp", 12)
    batches = list(zip(xs, ys))
    a = make(topo, "wpipe", P, placement, "adamw", ADAMW, m)
    a.train_steps(batches[:5])
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    got = a.evaluate(batches[:3])
    from asyncpp.pipeline import StageModule

    full = StageModule(mlp_layers(P))
    with torch.no_grad():
        named = dict(full.named_parameters())
        for ctx in a.contexts.values():
            for n, p in ctx.module.named_parameters():
                named[n].copy_(p)
    # every rank holds only its stages: sum the newest weights over ranks (zeros elsewhere)
    with torch.no_grad():
        mine = {n for ctx in a.contexts.values() for n, _ in ctx.module.named_parameters()}
        for n, p in named.items():
            if n not in mine:
                p.zero_()
            dist.all_reduce(p.data)
    want = [float(mse(full(x), y)) for x, y in batches[:3]]
    tail_a = a.train_steps(batches[5:])
    b = make(topo, "wpipe", P, placement, "adamw", ADAMW, m)
    buf.seek(0)
    b.load_state_dict(torch.load(buf, weights_only=True))
    tail_b = b.train_steps(batches[5:])
    same = all(torch.equal(pa, pb) for s in a.contexts
               for pa, pb in zip(a.contexts[s].module.parameters(),
                                 b.contexts[s].module.parameters()))
    return {"evaluate": max(abs(g - w) for g, w in zip(got, want)),
            "resume_losses_equal": tail_a == tail_b, "resume_weights_equal": same}


def check_interleaving_adapts(topo):
    """WPipe co-located with the last partition's backward slowed (a sleep on rank 1): rank 0
    runs its stages in another interleaving than the merged program's (stage 0's next
    forward needs nothing remote while stage 2 waits for its gradient), and the result is
    still the delay core's."""
    from asyncpp.pipeline.simulator import rank_programs

    P, m = 2 * topo.num_stages, 4
    placement = default_devices(build("wpipe", P, m))
    xs, ys = data("mlp", 12)
    *ref, _ = simulate_per_stage_delays(mlp_layers, P, "wpipe", "adamw", ADAMW, xs, ys, mse,
                                        "none")
    _, _, bw = simulate(mlp_layers, P, "2bw", "adamw", ADAMW, m, xs, ys, mse)
    ex = make(topo, "wpipe", P, placement, "adamw", ADAMW, m)
    ran = []
    for attr in ("_forward", "_backward"):
        fn = getattr(ex, attr)

        def logged(a, ctx, run, _fn=fn, _attr=attr):
            if a.stage == P - 1 and _attr == "_backward":
                time.sleep(0.02)
            ran.append((type(a).__name__, a.stage, a.step, a.mb))
            return _fn(a, ctx, run)

        setattr(ex, attr, logged)
    out = compare(ex, tuple(ref), xs, ys, bw, chunks=())
    merged = [(type(a).__name__, a.stage, a.step, a.mb) for a in rank_programs(
        build("wpipe", P, m, len(xs)), placement)[topo.stage] if type(a).__name__ in
        ("Forward", "Backward")]
    out["order_differs"] = ran != merged
    out["same_per_stage"] = all([x for x in ran if x[1] == s] == [x for x in merged
                                                                 if x[1] == s]
                                for s in placement[topo.stage])
    return out


def scenario_main(results):
    topo = PipelineTopology.create(2, timeout=60)
    for name, optname, hp, corr in [("adamw", "adamw", ADAMW, "none"),
                                    ("muon_ef", "muon", MUON, "ef"),
                                    ("adamw_taylor", "adamw", ADAMW, "taylor")]:
        for m in (3, 4):
            key, out = check_wpipe(topo, f"wpipe_{name}_m{m}", optname, hp, m, corr)
            results[key] = out
    for schedule, optname, hp, corr in [("1f1b", "adamw", ADAMW, "none"),
                                        ("1f1b", "muon", MUON, "none"),
                                        ("2bw", "muon", MUON, "ef"),
                                        ("gpipe", "adamw", ADAMW, "none")]:
        key, out = check_looped(topo, f"looped_{schedule}_{optname}_{corr}", schedule,
                                optname, hp, 4, corr)
        results[key] = out
    results["wpipe_evaluate_resume"] = check_evaluate_and_resume(topo)
    results["wpipe_interleaving_adapts"] = check_interleaving_adapts(topo)


SCENARIOS = {"main": scenario_main}


def main() -> None:
    scenario, outdir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    init_distributed("cpu", timeout=120)
    rank = dist.get_rank()
    results: dict = {}
    t0 = time.time()
    code = 0
    try:
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
