"""Setting up a rank's stages: the delay of each stage's updates, the check of a placement,
the stage-to-rank routing and each :class:`~.stage.Stage` with its delay-core optimizer."""

from __future__ import annotations

from collections.abc import Mapping

import torch.distributed as dist
from torch.optim import Optimizer

from ...delay import DelayedOptimizer
from .. import schedules as S
from ..registry import get_spec
from .stage import Stage


def stage_delay(schedule: str, num_stages: int, stage: int) -> int:
    """The delay τ of a stage's updates: 2BW 1, PipeDream P − 1 − s, GPipe/1F1B 0."""
    spec = get_spec(schedule)
    if not spec.needs_pipeline:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; allowed: "
                         f"{', '.join(S.SCHEDULES)}")
    return spec.stage_delay(num_stages, stage)


def place(given, topology, modules: dict, optimizer, stage, device, max_grad_norm,
          clip_scope):
    """This rank's part of the placement: ``(placement, stages of this rank, rank of each
    stage, modules by stage, optimizers by stage)``. One stage per rank (``given`` is
    ``None``) is the placement of one stage on each rank; ``modules``/``optimizer`` are then
    the one module and optimizer of this rank's stage."""
    R, r = topology.num_stages, topology.stage
    placement = given or tuple((k,) for k in range(R))
    if given is None:
        modules, optimizer = {r: stage}, {r: optimizer}
    P, mine = sum(map(len, placement)), list(placement[r])
    where = {s: k for k, d in enumerate(placement) for s in d}
    stage_rank = [topology.stage_ranks[where[s]] for s in range(P)]
    if sorted(modules) != sorted(mine):
        raise ValueError(f"rank {r} of the pipeline runs stages {mine} (placement "
                         f"{placement}), but got modules for {sorted(modules)}")
    if given is not None:
        if topology.distributed and device.type == "cuda":
            raise ValueError("several stages per rank need the gloo backend (NCCL matches "
                             "messages by order, not by tag)")
        if max_grad_norm is not None and clip_scope == "global" and R > 1:
            raise ValueError("several stages per rank: clip with clip_scope='stage' (a "
                             "global norm would join updates the schedule keeps apart)")
    if topology.distributed and device.type == "cuda":
        if dist.get_backend(topology.world_group) == "gloo":
            raise ValueError("CUDA stages need the NCCL backend; init_distributed picks it "
                             "from the device")
    return placement, mine, stage_rank, modules, optimizer


def make_stage(ex, module, optimizer, tied_parameters, name: str, P: int, s: int) -> Stage:
    """The :class:`Stage` of stage ``s`` of ``P`` on executor ``ex``, after the rank-local
    checks: the delay-core wrapper (its delay must be the schedule's, :func:`stage_delay`;
    a bare optimizer is wrapped with it) and the tied weights."""
    params = [(n, p) for n, p in module.named_parameters()]
    tau = stage_delay(name, P, s)
    if isinstance(optimizer, DelayedOptimizer):
        dopt = optimizer
        if dopt.formulation != "gradient":
            raise ValueError(
                "the pipeline realises the 'gradient' delay formulation "
                "(x_{t+1} = x_t - U(g_{t-tau}; x_t)); build the DelayedOptimizer with "
                f"formulation='gradient', not {dopt.formulation!r}"
            )
        bad = [d for d in dopt.schedule.delays if d != tau]
        if bad:
            raise ValueError(
                f"schedule {name!r} gives stage {s} of {P} a delay of {tau}, but its "
                f"DelayedOptimizer has delays {list(dopt.schedule.delays)}; build it with "
                f"delay={tau}"
            )
        windows = dopt.schedule.sync_start or dopt.schedule.sync_cooldown
        if windows and not ex.spec.sync_windows:
            raise ValueError("synchronous start/cooldown is supported with the 2bw schedule "
                             f"(and trivially gpipe/1f1b), not {name}; set them to 0")
    elif isinstance(optimizer, Optimizer):
        dopt = DelayedOptimizer(optimizer, delay=tau)
    else:
        raise ValueError(f"optimizer must be a torch.optim.Optimizer or a DelayedOptimizer, "
                         f"got {type(optimizer).__name__}")
    names = {id(p): n for n, p in params}
    for group in dopt.param_groups:
        for p in group["params"]:
            if id(p) not in names:
                raise ValueError(
                    "the optimizer holds a parameter that is not in this stage; build it "
                    "over stage.named_parameters()"
                )
    if tied_parameters is None:
        tied_parameters = getattr(module, "tied_parameters", None) or {}
    tied = dict(tied_parameters)
    for k in tied:
        if k not in dict(params):
            raise ValueError(f"tied parameter {k!r} is not a parameter of this stage")
    if P == 1:
        tied = {}
    if tied and not ex.spec.tied_weights:
        raise ValueError("tied first/last-stage weights need equal delays on both stages; "
                         f"{name} gives them P-1 and 0 — untie them or use 2bw")
    if tied and ex.merged:
        raise ValueError("tied first/last-stage weights with several stages per rank are "
                         "not supported; untie them or run one stage per rank")
    if ex.clip_scope == "stage" and tied and ex.max_grad_norm is not None:
        raise ValueError("clip_scope='stage' with weights tied between the first and the last "
                         "stage has no single-model equivalent; use clip_scope='global'")
    return Stage(s, P, module, dopt, params, tied, num_microbatches=ex.num_microbatches,
                 loss_fn=ex.loss_fn, forward_fn=ex.forward_fn)


def check_placement(placement, stage, optimizer):
    """``placement`` as a tuple of tuples (``None`` stays ``None``: one stage per rank), after
    checking that it splits the stages 0..P-1 among the ranks and that the stages and
    optimizers come in the form it needs (mappings by stage index with a placement, one
    module and one optimizer without)."""
    if placement is None:
        if isinstance(stage, Mapping) or isinstance(optimizer, Mapping):
            raise ValueError("a mapping of stages (or optimizers) needs placement=, the stages "
                             "each rank runs")
        return None
    devs = [list(d) for d in placement]
    flat = sorted(s for d in devs for s in d)
    if not devs or any(not d for d in devs) or flat != list(range(len(flat))):
        raise ValueError(f"placement {devs} must split the stages 0..P-1 among the ranks, each "
                         "rank at least one")
    if not (isinstance(stage, Mapping) and isinstance(optimizer, Mapping)):
        raise ValueError("with placement=, give stage and optimizer as mappings {stage index: "
                         "module / optimizer} of the stages this rank runs")
    return tuple(tuple(d) for d in devs)
