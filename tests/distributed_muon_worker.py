"""One rank of the DistributedMuon check (run by tests/test_distributed_muon.py).

``python tests/distributed_muon_worker.py RANK WORLD INIT_FILE OUT_DIR`` joins a gloo group
through a FileStore, runs every check against a single-process ``Muon`` reference computed in
this process, and writes its findings to ``OUT_DIR/rank{RANK}.pt`` for the test to assert on.
"""

from __future__ import annotations

import copy
import io
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from asyncpp.optim.distributed_muon import DistributedMuon
from asyncpp.optim.muon import Muon

# group 0: Nesterov Muon; group 1: other Muon hyper-parameters; group 2: AdamW (replicated)
SHAPES = [
    [(8, 8), (8, 8), (16, 8), (8, 16), (3, 8, 12), (2, 12, 8), (5, 7), (24, 16)],
    [(12, 12), (4, 6, 6), (7, 5)],
    [(8,), (10, 4)],
]
N_MUON = sum(len(s) for s in SHAPES[:2])
# parameter index -> steps on which it has no gradient (on every rank)
NO_GRAD = {2: {2, 5, 8, 13}, 5: {0, 1, 2, 3}, 9: {7}, 11: {3, 12}}
STEPS, MORE = 12, 3
HP = dict(lr=0.02, momentum=0.95, nesterov=True, weight_decay=0.1, adamw_lr=1e-3,
          adamw_weight_decay=0.01)


def make_params(dtype: torch.dtype) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)
    return [torch.randn(s, generator=gen, dtype=dtype)
            for s in (shape for group in SHAPES for shape in group)]


def make_groups(params: list[torch.Tensor]) -> list[dict]:
    a, b = len(SHAPES[0]), len(SHAPES[0]) + len(SHAPES[1])
    return [
        {"params": params[:a]},
        {"params": params[a:b], "lr": 0.01, "momentum": 0.9, "nesterov": False,
         "adjust_lr_fn": "match_rms_adamw"},
        {"params": params[b:], "use_muon": False},
    ]


def local_grad(step: int, rank: int, i: int, p: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(10_000 * step + 100 * rank + i)
    return torch.randn(p.shape, generator=gen, dtype=p.dtype)


def set_grads(params, step: int, world: int, rank: int | None) -> None:
    """rank=None: the reference's mean over ranks; else this rank's grad, all-reduced."""
    for i, p in enumerate(params):
        if step in NO_GRAD.get(i, ()):
            p.grad = None
        elif rank is None:
            p.grad = sum(local_grad(step, r, i, p) for r in range(world)) / world
        else:
            g = local_grad(step, rank, i, p)
            dist.all_reduce(g)
            p.grad = g.div_(world)


def run(opt, params, steps, world, rank) -> None:
    for t in steps:
        set_grads(params, t, world, rank)
        opt.step()


def max_dev(xs, ys) -> float:
    return max(float((x.double() - y.double()).abs().max()) for x, y in zip(xs, ys))


def state_dev(a: dict, b: dict) -> float:
    """Largest difference between two optimizer state dicts (same keys required)."""
    assert a["state"].keys() == b["state"].keys(), (a["state"].keys(), b["state"].keys())
    dev = 0.0
    for k, sa in a["state"].items():
        assert sa.keys() == b["state"][k].keys(), (k, sa.keys(), b["state"][k].keys())
        dev = max(dev, max_dev(list(sa.values()), list(b["state"][k].values())))
    return dev


def roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def main(rank: int, world: int, init_file: str, out_dir: str) -> None:
    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    out: dict = {"n_muon": N_MUON, "n_adamw": len(SHAPES[2])}
    f64 = dict(HP, ns_dtype="float64")

    # 1. float64 trajectory vs single-process Muon (several shapes, 3-D, missing grads).
    ref_p = make_params(torch.float64)
    ref = Muon(make_groups(ref_p), **f64)
    run(ref, ref_p, range(STEPS), world, None)
    params = make_params(torch.float64)
    opt = DistributedMuon(make_groups(params), **f64)
    run(opt, params, range(STEPS), world, rank)
    out["params"] = [p.clone() for p in params]
    out["dev_params"] = max_dev(params, ref_p)
    out["owned"] = [i for i, p in enumerate(params) if opt.owner(p) == rank]
    out["n_momentum"] = sum("momentum_buffer" in s for s in opt.state.values())
    out["n_adamw_state"] = sum("exp_avg" in s for s in opt.state.values())
    out["loads"] = list(opt._loads)

    # 2. checkpoints: consolidated == Muon's state; resume from shard / consolidated.
    ref_sd = copy.deepcopy(ref.state_dict())
    full = opt.consolidated_state_dict()
    out["dev_consolidated"] = state_dev(full, ref_sd)
    out["groups_equal"] = full["param_groups"] == ref_sd["param_groups"]
    out["dst_none_on_other"] = (opt.consolidated_state_dict(dst=0) is None) == (rank != 0)
    shard = roundtrip(opt.state_dict())
    full = roundtrip(full)
    frozen = [p.clone() for p in params]
    run(ref, ref_p, range(STEPS, STEPS + MORE), world, None)
    run(opt, params, range(STEPS, STEPS + MORE), world, rank)
    out["dev_continue"] = max_dev(params, ref_p)
    for name, sd, cls, bucket in [("shard", shard, DistributedMuon, 100),
                                  ("full", full, DistributedMuon, 1 << 26),
                                  ("muon", full, Muon, None)]:
        ps = [p.clone() for p in frozen]
        kw = dict(f64, bucket_numel=bucket) if bucket else f64
        o = cls(make_groups(ps), **kw)
        o.load_state_dict(copy.deepcopy(sd))  # torch aliases loaded tensors
        run(o, ps, range(STEPS, STEPS + MORE), world, rank if bucket else None)
        out[f"dev_resume_{name}"] = max_dev(ps, ref_p)

    # 3. a gradient present on one rank only: the same ValueError on every rank, no hang.
    set_grads(params, STEPS + MORE, world, rank)
    if rank == 1:
        params[3].grad = None
    try:
        opt.step()
        out["mixed_error"] = None
    except ValueError as e:
        out["mixed_error"] = str(e)
    dist.barrier()
    set_grads(params, STEPS + MORE, world, rank)
    opt.step()  # the group is still usable
    out["after_error_ok"] = True

    # 4. float32 parameters, default bfloat16 Newton–Schulz: measured against Muon.
    ref_p = make_params(torch.float32)
    ref = Muon(make_groups(ref_p), **HP)
    run(ref, ref_p, range(STEPS), world, None)
    params = make_params(torch.float32)
    opt = DistributedMuon(make_groups(params), **HP)
    run(opt, params, range(STEPS), world, rank)
    out["dev_fp32_bf16"] = max_dev(params, ref_p)

    dist.destroy_process_group()
    out["seconds"] = time.perf_counter() - t0
    torch.save(out, f"{out_dir}/rank{rank}.pt")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
