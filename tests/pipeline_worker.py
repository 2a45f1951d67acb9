"""Multi-process checks of the pipeline executor against the single-process simulation.

Run one scenario per launch, with the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT)::

    torchrun --standalone --nproc-per-node=4 tests/pipeline_worker.py main OUTDIR
    torchrun --standalone --nproc-per-node=3 tests/pipeline_worker.py failure OUTDIR

Every rank writes ``OUTDIR/rank{r}.json``: per check, the largest deviation it saw between
executor and simulation (parameters of the version the next step reads, the newest
parameters, per-step losses), or for ``failure`` the error it ended with and when.
"""

from __future__ import annotations

import copy
import io
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch import nn

from asyncpp.delay import DelayedOptimizer
from asyncpp.optim import Muon, build_optimizer
from asyncpp.pipeline import (
    ExecutorOptions,
    PipelineError,
    PipelineExecutor,
    PipelineTopology,
    StageModule,
    build_stages,
    init_distributed,
    stage_delay,
)

D = 8          # width
B = 8          # batch per replica
STEPS = 10
MUON = dict(lr=0.02, momentum=0.9, ns_dtype="float64", adamw_lr=0.01)
ADAMW = dict(lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)
mse = nn.functional.mse_loss


def ce(logits, y):
    return nn.functional.cross_entropy(logits, y)


# -- models and data --------------------------------------------------------------------------


def mlp_layers(num_stages: int, seed: int = 0):
    """2 Linear(+tanh) blocks per stage, float64 (2-D weights for Muon, biases for AdamW)."""
    torch.manual_seed(seed)
    n = 2 * num_stages
    layers = []
    for j in range(n):
        lin = nn.Linear(D, D, dtype=torch.float64)
        layers.append((f"blocks.{j}", nn.Sequential(lin, nn.Tanh()) if j < n - 1 else
                       nn.Sequential(lin)))
    return layers


def tied_layers(num_stages: int, vocab: int = 11, seed: int = 0):
    """Embedding → blocks → head whose weight *is* the embedding's (tied)."""
    torch.manual_seed(seed)
    emb = nn.Embedding(vocab, D, dtype=torch.float64)
    head = nn.Linear(D, vocab, bias=False, dtype=torch.float64)
    head.weight = emb.weight
    blocks = [(f"blocks.{j}", nn.Sequential(nn.Linear(D, D, dtype=torch.float64), nn.Tanh()))
              for j in range(2 * num_stages - 2)]
    return [("embed", emb), *blocks, ("head", head)]


def boundaries(num_layers: int, num_stages: int):
    per = num_layers // num_stages
    return [per * s for s in range(1, num_stages)]


def data(kind: str, rows: int, steps: int = STEPS, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    if kind == "tied":
        xs = [torch.randint(0, 11, (rows,), generator=g) for _ in range(steps)]
        ys = [torch.randint(0, 11, (rows,), generator=g) for _ in range(steps)]
    else:
        xs = [torch.randn(rows, D, generator=g, dtype=torch.float64) for _ in range(steps)]
        ys = [torch.randn(rows, D, generator=g, dtype=torch.float64) for _ in range(steps)]
    return xs, ys


# -- the single-process reference ------------------------------------------------------------


def simulate(layers_fn, P, schedule, optname, hp, m, xs, ys, loss_fn, *, correction="none",
             clip=None, **delay_kw):
    """Train the whole model in one process with the delay core; returns (losses, weights
    before flush, weights after flush) keyed by full parameter name."""
    layers = layers_fn(P)
    model = StageModule(layers)  # the whole model as one "stage": same parameter names
    forward = model
    named = list(model.named_parameters())
    if schedule == "pipedream":
        # One group (Muon: two) per stage, delays τ_s = P − 1 − s.
        stages = build_stages(layers, P, boundaries=boundaries(len(layers), P))
        ids = {id(p): n for n, p in named}
        groups, delays = [], []
        for s, st in enumerate(stages):
            params = [p for p in st.parameters()]
            if optname == "muon":
                mats = [p for p in params if p.ndim == 2]
                rest = [p for p in params if p.ndim != 2]
                groups += [{"params": mats, "use_muon": True}, {"params": rest, "use_muon": False}]
                delays += [P - 1 - s] * 2
            else:
                groups.append({"params": params})
                delays.append(P - 1 - s)
            assert all(id(p) in ids for p in params)
        opt = Muon(groups, **hp) if optname == "muon" else torch.optim.AdamW(groups, **hp)
        dopt = DelayedOptimizer(opt, delay=delays, correction=correction)
    else:
        opt = build_optimizer(optname, named, **hp)
        delay = 1 if schedule == "2bw" else 0
        dopt = DelayedOptimizer(opt, delay=delay, correction=correction, **delay_kw)
    losses = []
    for x, y in zip(xs, ys):
        if schedule == "pipedream":
            step_loss = 0.0
            for xm, ym in zip(torch.tensor_split(x, m), torch.tensor_split(y, m)):
                loss = loss_fn(forward(xm), ym)
                loss.backward()
                step_loss += loss.item() / m
                dopt.step()
                dopt.zero_grad()
            losses.append(step_loss)
            continue
        loss = loss_fn(forward(x), y)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        dopt.step()
        dopt.zero_grad()
        losses.append(loss.item())
    before = {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}
    dopt.flush()
    after = {n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)}
    return losses, before, after


# -- the executor side -----------------------------------------------------------------------


def make_executor(topo, layers_fn, schedule, optname, hp, m, loss_fn, *, correction="none",
                  max_grad_norm=None, on_gradients=None, config=None, **delay_kw):
    P, s = topo.num_stages, topo.stage
    layers = layers_fn(P)
    stage = build_stages(layers, P, boundaries=boundaries(len(layers), P), stages=[s])[0]
    opt = build_optimizer(optname, stage.named_parameters(), **hp)
    dopt = DelayedOptimizer(opt, delay=stage_delay(schedule, P, s), correction=correction,
                            **delay_kw)
    ex = PipelineExecutor(stage, dopt, schedule=schedule, num_microbatches=m, topology=topo,
                          loss_fn=loss_fn,
                          options=ExecutorOptions(max_grad_norm=max_grad_norm, timeout=60,
                                                  on_gradients=on_gradients, config=config))
    return ex


def my_rows(topo, x):
    """This replica's share of a doubled batch."""
    n = x.shape[0] // topo.dp_size
    return x[topo.dp_rank * n:(topo.dp_rank + 1) * n]


def deviation(ex, sim, chunks=(4,), start=0, *, xs, ys):
    """Run the executor over steps ``start..`` of the data in chunks (calls ending at the
    given step indices) and compare with the simulation."""
    topo = ex.topo
    losses_ref, before, after = sim
    batches = [(my_rows(topo, x), my_rows(topo, y)) for x, y in zip(xs, ys)]
    losses = []
    for c in [*chunks, len(batches)]:
        if start < min(c, len(batches)):
            losses += ex.train_steps(batches[start:c])
            start = c
    next_w = ex.weights()
    newest = {n: p.detach() for n, p in ex.stage.named_parameters()}
    return {
        "params_next": max(float((next_w[n] - before[n]).abs().max()) for n in next_w),
        "params_newest": max(float((p - after[n]).abs().max()) for n, p in newest.items()),
        "loss": max(abs(a - b) for a, b in zip(losses, losses_ref[-len(losses):])),
        "steps": len(losses), "versions": ex.live_versions(),
    }


def check(topo, name, layers_fn, schedule, optname, hp, m, loss_fn, kind="mlp",
          correction="none", clip=None, chunks=(4,), **delay_kw):
    rows = B * topo.dp_size
    xs, ys = data(kind, rows)
    sim = simulate(layers_fn, topo.num_stages, schedule, optname, hp, m, xs, ys, loss_fn,
                   correction=correction, clip=clip, **delay_kw)
    ex = make_executor(topo, layers_fn, schedule, optname, hp, m, loss_fn,
                       correction=correction, max_grad_norm=clip, **delay_kw)
    out = deviation(ex, sim, chunks=chunks, xs=xs, ys=ys)
    if schedule in ("2bw", "pipedream"):
        # Negative control: the same run is far from *synchronous* training, so the match
        # above is not vacuous.
        _, _, sync_after = simulate(layers_fn, topo.num_stages, "gpipe", optname, hp, m, xs, ys,
                                    loss_fn, clip=clip)
        out["control"] = max(float((p.detach() - sync_after[n]).abs().max())
                             for n, p in ex.stage.named_parameters())
    if clip is not None:
        out["last_grad_norm"] = ex.last_grad_norm
    return name, out


# -- scenarios --------------------------------------------------------------------------------


def stream_vs_drain(topo, name, layers_fn, schedule, optname, hp, m, loss_fn, kind="mlp",
                    correction="none", clip=None, dtype=torch.float32):
    """The streamed run (one ``run_steps`` call of all steps, no drain between them) against
    the per-step-drain run (one ``train_steps([batch])`` call per step) from the same start:
    per-step losses and every live weight version must agree bit for bit."""
    rows = B * topo.dp_size
    xs, ys = data(kind, rows)
    if dtype != torch.float64 and kind != "tied":
        xs, ys = [x.to(dtype) for x in xs], [y.to(dtype) for y in ys]

    def layers(P):
        return [(n, mod.to(dtype)) for n, mod in layers_fn(P)]

    batches = [(my_rows(topo, x), my_rows(topo, y)) for x, y in zip(xs, ys)]
    drained = make_executor(topo, layers, schedule, optname, hp, m, loss_fn,
                            correction=correction, max_grad_norm=clip)
    per_step = [ex_loss for b in batches for ex_loss in drained.train_steps([b])]
    streamed = make_executor(topo, layers, schedule, optname, hp, m, loss_fn,
                             correction=correction, max_grad_norm=clip)
    outs = list(streamed.run_steps(iter(batches), len(batches)))
    losses = torch.zeros(len(outs), dtype=torch.float64)
    if topo.is_last:
        losses = torch.stack([o.loss for o in outs])
    stream_losses = streamed._gather_losses(losses, topo.is_last)
    same_versions = drained.live_versions() == streamed.live_versions()
    weights_equal = same_versions and all(
        torch.equal(drained.weights(v)[n], streamed.weights(v)[n])
        for v in drained.live_versions() for n in drained.weights(v))
    return name, {"losses_equal": per_step == stream_losses, "steps": len(outs),
                  "weights_equal": weights_equal, "versions": streamed.live_versions(),
                  "next_step": [drained.next_step, streamed.next_step],
                  "updates": streamed.updates_issued}


def common_checks(topo, results, m):
    P = topo.num_stages
    for name, *args in [
        ("2bw_muon", mlp_layers, "2bw", "muon", MUON, m, mse),
        ("2bw_muon_ef", mlp_layers, "2bw", "muon", MUON, m, mse),
        ("pipedream_adamw", mlp_layers, "pipedream", "adamw", ADAMW, m, mse),
        ("2bw_adamw_tied_clip", tied_layers, "2bw", "adamw", ADAMW, m, ce),
    ]:
        corr = "ef" if name.endswith("_ef") else "none"
        kind = "tied" if "tied" in name else "mlp"
        clip = 0.5 if name.endswith("clip") else None
        key, out = stream_vs_drain(topo, f"P{P}_{name}_stream_vs_drain", *args, kind=kind,
                                   correction=corr, clip=clip)
        results[key] = out
    for name, *args in [
        ("2bw_muon_ef", mlp_layers, "2bw", "muon", MUON, m, mse),
        ("2bw_adamw", mlp_layers, "2bw", "adamw", ADAMW, m, mse),
        ("pipedream_adamw", mlp_layers, "pipedream", "adamw", ADAMW, m, mse),
        ("pipedream_muon_ef", mlp_layers, "pipedream", "muon", MUON, m, mse),
        ("gpipe_adamw", mlp_layers, "gpipe", "adamw", ADAMW, m, mse),
        ("1f1b_muon", mlp_layers, "1f1b", "muon", MUON, m, mse),
        ("2bw_adamw_tied", tied_layers, "2bw", "adamw", ADAMW, m, ce),
    ]:
        corr = "ef" if name.endswith("_ef") else "none"
        kind = "tied" if name.endswith("tied") else "mlp"
        key, out = check(topo, f"P{P}_{name}", *args, correction=corr, kind=kind)
        results[key] = out
    # EF(γ) with γ ∉ {0, 1}: the executor carries γ through the shared delay core.
    key, out = check(topo, f"P{P}_2bw_muon_ef_gamma", mlp_layers, "2bw", "muon", MUON, m, mse,
                     correction="ef", ef_gamma=0.7)
    results[key] = out


def torch_pipelining_check(topo, results, m):
    """GPipe / 1F1B losses and first-step gradients vs torch.distributed.pipelining."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    P, s = topo.num_stages, topo.stage
    xs, ys = data("mlp", B)
    for name, cls in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        grads = {}
        ex = make_executor(topo, mlp_layers, name, "adamw", ADAMW, m, mse,
                           on_gradients=lambda u, g, grads=grads: grads.setdefault(u, {
                               k: v.clone() for k, v in g.items()}))
        ref_mod = copy.deepcopy(ex.stage)
        loss_mine = ex.train_steps([(xs[0], ys[0])])[0]
        stage = PipelineStage(ref_mod, s, P, torch.device("cpu"), group=topo.pp_group)
        sched = cls(stage, n_microbatches=m, loss_fn=mse)
        tl = []
        if s == 0:
            sched.step(xs[0])
        elif s == P - 1:
            sched.step(target=ys[0], losses=tl)
        else:
            sched.step()
        dev_g = max(float((p.grad - grads[0][n]).abs().max())
                    for n, p in ref_mod.named_parameters())
        t_loss = torch.tensor([sum(float(x) for x in tl) / m if tl else 0.0],
                              dtype=torch.float64)
        dist.all_reduce(t_loss, group=topo.pp_group)
        results[f"P{P}_{name}_vs_torch_pipelining"] = {
            "grads": dev_g, "loss": abs(float(t_loss) - loss_mine)}


def p2_checks(topo, results):
    common_checks(topo, results, m=4)
    # Taylor + synchronous start/cooldown + global-norm clipping, chunks crossing a switch.
    key, out = check(topo, "P2_2bw_adamw_taylor_sync_clip", mlp_layers, "2bw", "adamw", ADAMW,
                     4, mse, correction="taylor", clip=0.1, chunks=(1, 3, 8), sync_start=2,
                     sync_cooldown=2, total_steps=STEPS, taylor_lambda=5.0)
    results[key] = out
    torch_pipelining_check(topo, results, m=4)
    # Forward-only evaluation on the newest weights.
    xs, ys = data("mlp", B)
    _, _, after = simulate(mlp_layers, 2, "2bw", "adamw", ADAMW, 4, xs, ys, mse)
    ex = make_executor(topo, mlp_layers, "2bw", "adamw", ADAMW, 4, mse)
    ex.train_steps(list(zip(xs, ys)))
    ref = StageModule(mlp_layers(2))
    ref.load_state_dict(after)
    with torch.no_grad():
        want = [float(mse(ref(x), y)) for x, y in zip(xs[:3], ys[:3])]
    got = ex.evaluate(list(zip(xs[:3], ys[:3])))
    results["P2_evaluate"] = {"loss": max(abs(a - b) for a, b in zip(got, want))}
    # Checkpoint round trip in the middle of a 2BW+EF run.
    xs, ys = data("mlp", B)
    sim = simulate(mlp_layers, 2, "2bw", "muon", MUON, 4, xs, ys, mse, correction="ef")
    ex = make_executor(topo, mlp_layers, "2bw", "muon", MUON, 4, mse, correction="ef")
    ex.train_steps(list(zip(xs[:5], ys[:5])))
    buf = io.BytesIO()
    torch.save(ex.state_dict(), buf)
    ex2 = make_executor(topo, lambda P: mlp_layers(P, seed=7), "2bw", "muon", MUON, 4, mse,
                        correction="ef")
    buf.seek(0)
    ex2.load_state_dict(torch.load(buf, weights_only=True))
    results["P2_2bw_muon_ef_checkpoint_resume"] = deviation(ex2, sim, chunks=(7,), start=5,
                                                            xs=xs, ys=ys)
    # Configurations that differ across ranks are refused on every rank.
    try:
        make_executor(topo, mlp_layers, "2bw", "adamw", ADAMW, 2 + topo.stage, mse)
        results["config_mismatch"] = {"raised": False}
    except ValueError as e:
        results["config_mismatch"] = {"raised": True, "message": str(e)}
    # A nested configuration (a trainer's) is compared leaf by leaf.
    nested = {"train": {"lr": 0.01 * (1 + topo.stage), "steps": 5}, "run": {"seed": 0}}
    try:
        make_executor(topo, mlp_layers, "2bw", "adamw", ADAMW, 2, mse, config=nested)
        results["nested_config_mismatch"] = {"raised": False}
    except ValueError as e:
        results["nested_config_mismatch"] = {"raised": True, "message": str(e)}
    # A set-up mistake on one rank (a wrong delay on the last stage) stops both ranks.
    stage = build_stages(mlp_layers(2), 2, boundaries=[2], stages=[topo.stage])[0]
    opt = torch.optim.SGD(stage.parameters(), lr=0.1)
    try:
        PipelineExecutor(stage, DelayedOptimizer(opt, delay=1 + topo.stage), schedule="2bw",
                         num_microbatches=2, topology=topo, loss_fn=mse)
        results["setup_error"] = {"raised": False}
    except ValueError as e:
        results["setup_error"] = {"raised": True, "message": str(e)}


def scenario_main(results):
    """4 ranks: a P = 4 pipeline; two independent P = 2 pipelines on explicit groups
    {0, 1} and {2, 3}; DP = 2 × PP = 2."""
    rank = dist.get_rank()
    assert dist.get_world_size() == 4, "the main scenario needs 4 ranks"
    t0 = time.time()
    common_checks(PipelineTopology.create(4, timeout=60), results, m=4)
    results["time_P4"] = time.time() - t0
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    t0 = time.time()
    p2_checks(PipelineTopology.from_groups(pairs[rank // 2]), results)
    results["time_P2"] = time.time() - t0
    t0 = time.time()
    topo = PipelineTopology.create(2, timeout=60)
    assert topo.dp_size == 2
    for name, args, kw in [
        ("2bw_muon_ef", (mlp_layers, "2bw", "muon", MUON, 4, mse), {"correction": "ef"}),
        ("2bw_muon_ef_tied", (tied_layers, "2bw", "muon", MUON, 4, ce),
         {"correction": "ef", "kind": "tied"}),
        ("1f1b_adamw", (mlp_layers, "1f1b", "adamw", ADAMW, 4, mse), {}),
    ]:
        key, out = check(topo, f"DP2xPP2_{name}", *args, **kw)
        results[key] = out
    # The same layout from a 2-D DeviceMesh ("dp", "pp").
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "pp"))
    topo = PipelineTopology.create(2, mesh=mesh, timeout=60)
    assert (topo.dp_size, topo.stage, topo.dp_rank) == (2, rank % 2, rank // 2)
    key, out = check(topo, "DP2xPP2_mesh_2bw_adamw_tied", tied_layers, "2bw", "adamw", ADAMW,
                     4, ce, kind="tied")
    results[key] = out
    results["time_DP2xPP2"] = time.time() - t0


def scenario_failure(results, rank):
    """P = 3: rank 2 goes silent; rank 1 must time out, rank 0 then sees rank 1 die, rank 2
    finds its peers gone when it wakes up. Every rank must end with a PipelineError."""
    topo = PipelineTopology.create(3, timeout=1.5)
    layers = mlp_layers(3)
    stage = build_stages(layers, 3, boundaries=boundaries(len(layers), 3), stages=[rank])[0]
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    ex = PipelineExecutor(stage, opt, schedule="2bw", num_microbatches=2, topology=topo,
                          loss_fn=mse, options=ExecutorOptions(timeout=1.5))
    xs, ys = data("mlp", 4, steps=4)
    ex.train_steps(list(zip(xs[:2], ys[:2])))
    if rank == 2:
        time.sleep(4.0)
    t0 = time.time()
    try:
        ex.train_steps(list(zip(xs[2:], ys[2:])))
        results["error"] = None
    except PipelineError as e:
        results["error"] = str(e)
        results["type"] = type(e).__name__
    results["elapsed"] = time.time() - t0


def main() -> None:
    scenario, outdir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    init_distributed("cpu", timeout=120)
    rank = dist.get_rank()
    results: dict = {}
    t0 = time.time()
    code = 0
    try:
        if scenario not in ("main", "failure"):
            raise ValueError(f"unknown scenario {scenario!r}; use 'main' or 'failure'")
        if scenario == "failure":
            scenario_failure(results, rank)
        else:
            scenario_main(results)
    except Exception:
        results["crash"] = traceback.format_exc()
        code = 1
    results["wall_s"] = time.time() - t0
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    if scenario == "failure" or code:
        os._exit(code)  # peers may be gone: skip the process-group teardown
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
