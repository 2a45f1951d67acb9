"""A rank's checkpoint: every live weight version of each of its stages, its optimizers and
the next step (one file per rank), and its restoration on the same layout."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .stage import Stage


def _stage_state(ctx: Stage) -> dict:
    return {"stage": ctx.stage, "newest": ctx.newest,
            "versions": {v: {n: t.detach().clone() for n, t in ws.items()}
                         for v, ws in ctx.versions.items()},
            "optimizer": ctx.optimizer.state_dict()}


def state_dict(ex) -> dict:
    """Everything this rank needs to resume: every live weight version of each stage (the
    newest is the stage's parameters), the DelayedOptimizer (wrapped optimizer + EF memory
    + counters), the next step and the layout. Save one file per rank."""
    head = {"format": "asyncpp.pipeline/1", "schedule": ex.schedule_name,
            "num_stages": ex.num_stages, "num_microbatches": ex.num_microbatches,
            "dp_rank": ex.topo.dp_rank, "next_step": ex.next_step}
    if not ex.merged:  # one stage per rank: its state at the top level
        (st,) = [_stage_state(c) for c in ex.contexts.values()]
        return {**head, "stage": st["stage"], "newest": st["newest"],
                "versions": st["versions"], "optimizer": st["optimizer"]}
    return {**head, "stage": sorted(ex.contexts),
            "stages": {s: _stage_state(c) for s, c in ex.contexts.items()}}


@torch.no_grad()
def load_state_dict(ex, state: Mapping) -> None:
    """Restore :meth:`state_dict` (from the same stage(s) of the same layout)."""
    if state.get("format") != "asyncpp.pipeline/1":
        raise ValueError("not an asyncpp pipeline checkpoint (missing format tag)")
    here = sorted(ex.contexts) if ex.merged else ex.placement[ex.topo.stage][0]
    mine = (ex.schedule_name, ex.num_stages, ex.num_microbatches, here)
    theirs = (state["schedule"], state["num_stages"], state["num_microbatches"],
              state["stage"])
    if mine != theirs:
        raise ValueError(
            f"checkpoint is for (schedule, stages, microbatches, stage) = {theirs}, this "
            f"rank runs {mine}; load the file written by the same stage of the same layout"
        )
    per_stage = state["stages"] if ex.merged else {here: state}
    for s, ctx in ex.contexts.items():
        _load_stage(ctx, per_stage[s], ex.device)
    ex.next_step = int(state["next_step"])
    for ctx in ex.contexts.values():
        ctx.next_item = (ex.next_step, 0)
        ctx.max_forwarded = ex.next_step - 1


def _load_stage(ctx: Stage, state: Mapping, device) -> None:
    newest = int(state["newest"])
    versions = state["versions"]
    for n, p in ctx.params:
        if n not in versions[newest]:
            raise ValueError(f"checkpoint lacks parameter {n!r}")
        p.data = versions[newest][n].to(device=p.device, dtype=p.dtype).clone()
    ctx.versions = {}
    for v, ws in versions.items():
        v = int(v)
        if v == newest:
            ctx.versions[v] = ctx.alias_master()
        else:
            ctx.versions[v] = {n: t.to(device).clone() for n, t in ws.items()}
    ctx.newest = newest
    ctx.optimizer.load_state_dict(state["optimizer"])
