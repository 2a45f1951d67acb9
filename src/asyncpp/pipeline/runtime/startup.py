"""What the ranks of a pipeline agree on before the first step: the same settings (compared
before the groups exist, then in full), the (stage, dp rank) layout, the tied weights, and
the same starting weights on every data-parallel replica and both tied copies."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist

from ..agreement import first_error
from ..rank_diff import compare_across_ranks


def describe(ex, config) -> dict:
    """The settings every rank of the pipeline must share, as plain data to compare."""
    ctx = next(iter(ex.contexts.values()))
    dopt = ctx.optimizer
    opt = dopt.optimizer
    defaults = {k: repr(v) for k, v in sorted(opt.defaults.items())}
    return {
        "schedule": ex.schedule_name, "num_stages": ex.num_stages,
        "num_microbatches": ex.num_microbatches, "dp_size": ex.topo.dp_size,
        "max_grad_norm": ex.max_grad_norm, "clip_scope": ex.clip_scope,
        "timeout": ex.timeout,
        "reduce_dp_gradients": ex.reduce_dp_gradients,
        "correction": dopt.correction, "taylor_lambda": dopt.taylor_lambda,
        "sync_start": dopt.schedule.sync_start, "sync_cooldown": dopt.schedule.sync_cooldown,
        "total_steps": dopt.schedule.total_steps, "optimizer": type(opt).__name__,
        "optimizer_defaults": defaults,
        "param_dtypes": sorted({str(p.dtype) for _, p in ctx.params}),
        "device_type": ex.device.type,
        **({"placement": [list(d) for d in ex.placement]} if ex.merged else {}),
        "config": json.loads(json.dumps(dict(config or {}), sort_keys=True, default=repr)),
    }


def check_config_early(name, num_stages, m, config) -> None:
    """Before creating groups (whose creation must match across ranks), compare the
    settings that shape them."""
    if not dist.is_initialized():
        return
    mine = {"schedule": name, "num_stages": num_stages, "num_microbatches": m,
            "config": json.loads(json.dumps(dict(config or {}), sort_keys=True,
                                            default=repr))}
    compare_across_ranks(mine, None)


def check_config(ex, config, local_error: str | None = None) -> None:
    """Every rank agrees: on a set-up error (one rank's stops them all with its message), on
    :func:`describe`, on the (stage, dp rank) layout and on the tied weights."""
    if not ex.topo.distributed:
        return
    g = ex.topo.world_group
    bad = first_error(local_error, g)
    if bad:
        raise ValueError(f"pipeline set-up failed on rank {bad[0]}: {bad[1]}")
    mine = describe(ex, config)
    compare_across_ranks(mine, g)
    # Topology and tied weights.
    tied = {}
    for ctx in ex.contexts.values():
        tied.update(ctx.tied)
        params = dict(ctx.params)
    entry = (ex.topo.stage, ex.topo.dp_rank,
             sorted((k, tuple(params[n].shape), str(params[n].dtype))
                    for n, k in tied.items()))
    everyone = [None] * dist.get_world_size(ex.topo.world_group)
    dist.all_gather_object(everyone, entry, group=ex.topo.world_group)
    places = [(e[0], e[1]) for e in everyone]
    if len(set(places)) != len(places):
        raise ValueError(f"two ranks claim the same (stage, dp rank): {places}")
    R = ex.topo.num_stages
    if R > 1:
        first = [e[2] for e in everyone if e[0] == 0]
        last = [e[2] for e in everyone if e[0] == R - 1]
        middle = [e[2] for e in everyone if 0 < e[0] < R - 1 and e[2]]
        if middle or any(f != first[0] for f in first) or any(x != first[0] for x in last):
            raise ValueError(
                "tied parameters must be present, with equal keys and shapes, on the first "
                f"and the last stage only; got first={first[0]}, last={last[0]}"
                f"{', middle stages too' if middle else ''}"
            )


@torch.no_grad()
def sync_start_weights(ex) -> None:
    """Start every data-parallel replica and both tied copies from the same weights:
    broadcast from DP rank 0 and from the first stage."""
    t = ex.topo
    if not t.distributed:
        return
    tr = ex.transport
    for ctx in ex.contexts.values():
        if t.dp_group is not None:
            src = dist.get_process_group_ranks(t.dp_group)[0]
            for _, p in ctx.params:
                tr.wait(dist.broadcast(p.data, src=src, group=t.dp_group, async_op=True),
                        "the start-up weight broadcast", tr.others(t.dp_group))
        if ctx.tied and t.tie_group is not None:
            params = dict(ctx.params)
            for n in sorted(ctx.tied, key=lambda k: ctx.tied[k]):
                tr.wait(dist.broadcast(params[n].data, src=t.stage_ranks[0],
                                       group=t.tie_group, async_op=True),
                        "the tied-weight broadcast", tr.others(t.tie_group))
