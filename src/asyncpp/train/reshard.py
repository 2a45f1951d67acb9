r"""A checkpoint's state by full-model parameter names, read from any layout and loaded into any
other (which layout changes are allowed: :mod:`asyncpp.train.layouts`).

The two backends hold the same state of a delayed run in two forms. After S steps of 2BW
(τ = 1), with :math:`x_t` the weights step t reads and :math:`g_t = g(x_t)`:

- one process (*queued* form): the model is :math:`x_S`; each stage's
  :class:`~asyncpp.delay.DelayedOptimizer` queues :math:`g_{S-1}`, its optimizer state and EF
  memory :math:`u^{(S-1)}` are those before :math:`g_{S-1}` is applied;
- ``torchrun`` (*applied* form, checkpoints are taken at drains): every update is applied, so a
  stage keeps the version :math:`x_S` that step S's forwards read and the master
  :math:`x_{S+1} = x_S - U(g_{S-1};\,x_S)` (with EF: :math:`-\,2u^{(S)} + u^{(S-1)}`), optimizer
  state and EF memory after it.

:class:`NamedState` holds either form: ``read`` (:math:`x_S`), ``master`` (the applied form's
:math:`x_{S+1}`, empty otherwise), ``queue`` (the queued form's pending entries), the wrapped
optimizer's per-parameter state (Muon momentum, AdamW moments and step) and the EF memory.
A tied embedding/head is one parameter, ``tok_embeddings.weight``; a pipeline's last-stage
copy (``output.weight``) is read from, and written as, that one.

Loading converts where needed, with the code the backend itself runs:

- queued → applied (into ``torchrun``): each stage runs its queued update now, exactly as step S
  of the simulation would: rate :math:`\eta_S`, ``DelayedOptimizer.flush()`` (the correction
  as configured; the queued gradient is already clipped);
- applied → queued (into one process): the queued gradient is gone, so the simulation starts
  from the applied form and reaches its own after one step: step S computes :math:`g_S` on
  :math:`x_S`, then the master :math:`x_{S+1}` replaces the weights and :math:`g_S` enters the
  queue, which is the queued form after step S. Where step S is synchronous (a cooldown starts
  at S) the master replaces the weights before the step, which then applies :math:`g_S` to
  :math:`x_{S+1}`, as the simulation's drain would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..models import build_model, stage_named_parameters
from .components import apply_lr, build_stage_optimizer, lr_at, to_device
from .config import Config

TIED = ("output.weight", "tok_embeddings.weight")
"""A tied head's name and the name its one tensor is kept under."""


@dataclass
class NamedState:
    """A checkpoint's state by full-model parameter names (see the module docstring)."""

    step: int
    read: dict[str, Tensor] = field(default_factory=dict)
    master: dict[str, Tensor] = field(default_factory=dict)
    queue: dict[str, list] = field(default_factory=dict)
    optim: dict[str, dict] = field(default_factory=dict)
    prev_update: dict[str, Tensor] = field(default_factory=dict)
    sampler: dict | None = None
    rng: dict | None = None

    def source(self, name: str, tied: bool) -> str:
        """The name ``name``'s tensor is kept under (a tied head: the embedding's)."""
        return TIED[1] if tied and name == TIED[0] and name not in self.read else name


def optimizer_names(cfg: Config, named, stage: int) -> list[list[str]]:
    """The parameter names of each group of the stage optimizer that
    :func:`build_stage_optimizer` builds over ``named`` (built over meta tensors of the same
    shapes: nothing is allocated), in the order its state dict numbers them."""
    meta = [(n, nn.Parameter(torch.empty(tuple(t.shape), dtype=t.dtype, device="meta")))
            for n, t in named]
    dopt = build_stage_optimizer(cfg, meta, stage, torch.device("cpu"))
    name_of = {id(p): n for n, p in meta}
    return [[name_of[id(p)] for p in g["params"]] for g in dopt.param_groups]


def _collect(into: NamedState, dstate: dict, names: list[list[str]], delay_state: bool) -> None:
    """Add a DelayedOptimizer state dict's per-parameter entries to ``into`` by name: the
    wrapped optimizer's state always (replicas of a ZeRO-1 Muon each hold their share), the
    queue and EF memory when ``delay_state``."""
    flat = [n for g in names for n in g]
    for i, n in enumerate(flat):
        st = dstate["optimizer"]["state"].get(i)
        if st:
            into.optim.setdefault(n, {}).update(st)
    if not delay_state:
        return
    for g, group in enumerate(names):
        for entry in dstate["queues"][g]:
            for n, item in zip(group, entry):
                into.queue.setdefault(n, []).append(item)
        prev = dstate["prev_update"][g]
        for n, u in zip(group, prev or ()):
            if u is not None:
                into.prev_update[n] = u


def _drop_tied_copy(state: NamedState, cfg: Config) -> None:
    """The pipeline's last stage holds a copy of a tied embedding; keep the first stage's."""
    if not cfg.model_config().tie_embeddings or TIED[1] not in state.read:
        return
    for table in (state.read, state.master, state.queue, state.optim, state.prev_update):
        table.pop(TIED[0], None)


def from_simulation(ckpt: dict, saved: Config) -> NamedState:
    """The :class:`NamedState` of a one-process checkpoint (queued form)."""
    P = saved.pipeline.stages
    model = build_model(saved.model_config(), device="meta")
    groups = stage_named_parameters(model, P)
    state = NamedState(int(ckpt["step"]), sampler=ckpt["sampler"], rng=ckpt["rng"])
    for s, (group, dstate) in enumerate(zip(groups, ckpt["optimizers"])):
        for n, _ in group:
            state.read[n] = ckpt["model"][n]
            if n in ckpt.get("ahead", {}):  # saved before the simulation installed it
                state.master[n] = ckpt["ahead"][n]
        _collect(state, dstate, optimizer_names(saved, group, s), delay_state=True)
    return state


def from_shards(shards: list[dict], saved: Config) -> NamedState:
    """The :class:`NamedState` of a torchrun checkpoint from every rank's shard (applied
    form: ``read`` the oldest live version of each stage, ``master`` its newest)."""
    first = shards[0]
    state = NamedState(int(first["step"]), sampler=first["sampler"], rng=first["rng"])
    for shard in shards:
        ex = shard["executor"]
        replica0 = int(ex.get("dp_rank", 0)) == 0
        stages = ex["stages"].items() if "stages" in ex else [(ex["stage"], ex)]
        for s, st in stages:
            versions = {int(v): ws for v, ws in st["versions"].items()}
            newest = int(st["newest"])
            live = sorted(versions)  # more than two only under PipeDream, kept in its layout
            names = optimizer_names(saved, list(versions[newest].items()), int(s))
            if replica0:
                state.read.update(versions[live[0]])
                if live[0] != newest:
                    state.master.update(versions[newest])
            _collect(state, st["optimizer"], names, delay_state=replica0)
    _drop_tied_copy(state, saved)
    return state


def from_checkpoint(ckpt: dict, saved: Config) -> NamedState:
    """The :class:`NamedState` of ``ckpt``: a one-process checkpoint, or a torchrun manifest
    with its ranks' shards in ``ckpt["shards"]`` (see :func:`ckpt_io.load_shards`)."""
    if "distributed" in ckpt:
        return from_shards(ckpt["shards"], saved)
    return from_simulation(ckpt, saved)


def delayed_state(dopt, names: list[list[str]], state: NamedState, tied: bool,
                  step_count: int, device) -> dict:
    """A state dict for ``dopt`` (groups of parameters ``names``) holding ``state``'s entries
    of those names: its own hyperparameters, the named optimizer state, queue and EF memory."""
    base = dopt.state_dict()
    opt = {k: v for k, v in base["optimizer"].items() if k in ("state", "param_groups")}
    flat = [state.source(n, tied) for g in names for n in g]
    opt["state"] = {i: to_device(state.optim[n], device) for i, n in enumerate(flat)
                    if n in state.optim}
    queues, prev = [], []
    for group in names:
        src = [state.source(n, tied) for n in group]
        depth = {len(state.queue.get(n, ())) for n in src}
        if len(depth) > 1:
            raise ValueError(f"the parameters {group} queue different numbers of gradients "
                             f"({sorted(depth)}); they cannot share one optimizer group")
        k = depth.pop() if depth else 0
        queues.append([[to_device(state.queue[n][j], device) for n in src] for j in range(k)])
        us = [state.prev_update.get(n) for n in src]
        prev.append(None if all(u is None for u in us) else [to_device(u, device) for u in us])
    return {**base, "optimizer": opt, "step_count": step_count, "queues": queues,
            "prev_update": prev, "last_applied": [None] * len(names)}


def _missing(state: NamedState, names, tied: bool) -> list[str]:
    return [n for n in names if state.source(n, tied) not in state.read]


@torch.no_grad()
def load_into_simulation(backend, state: NamedState) -> dict[int, dict]:
    """Load ``state`` into a :class:`~asyncpp.train.simulation.SimulationBackend` (after it
    built its model and stage optimizers); returns, per stage, the master weights
    ``{parameter: tensor}`` the first step installs (applied form; empty otherwise)."""
    cfg = backend.cfg
    tied = cfg.model_config().tie_embeddings
    named = stage_named_parameters(backend.model, cfg.pipeline.stages)
    gone = _missing(state, [n for g in named for n, _ in g], tied)
    if gone:
        raise ValueError(f"the checkpoint of step {state.step} lacks {gone[:3]}")
    k = cfg.schedule_spec.updates_per_step(cfg.pipeline.microbatches)
    ahead: dict[int, dict] = {}
    for s, (group, dopt) in enumerate(zip(named, backend.dopts)):
        for n, p in group:
            p.copy_(state.read[state.source(n, tied)])
        name_of = {id(p): n for n, p in group}
        names = [[name_of[id(p)] for p in g["params"]] for g in dopt.param_groups]
        dopt.load_state_dict(delayed_state(dopt, names, state, tied, state.step * k,
                                           backend.device))
        ahead[s] = {p: state.master[state.source(n, tied)].to(backend.device)
                    for n, p in group if state.source(n, tied) in state.master}
    return ahead


@torch.no_grad()
def load_into_executor(ex, cfg: Config, state: NamedState, device) -> None:
    """Load ``state`` into this rank's :class:`~asyncpp.pipeline.PipelineExecutor` (its stages
    built, nothing run): each stage gets the version step S reads and, where an update is
    already applied or queued (then applied now, see the module docstring), the master."""
    tied = cfg.model_config().tie_embeddings
    k = cfg.schedule_spec.updates_per_step(cfg.pipeline.microbatches)
    S = state.step
    per_stage = {}
    for s, ctx in ex.contexts.items():
        gone = _missing(state, [n for n, _ in ctx.params], tied)
        if gone:
            raise ValueError(f"the checkpoint of step {S} lacks {gone[:3]} of stage {s}")
        dopt = ctx.optimizer
        names = [[ctx.name_of[id(p)] for p in g["params"]] for g in dopt.param_groups]
        read = {n: state.read[state.source(n, tied)].to(device) for n, _ in ctx.params}
        v = ex.version_for_step(S, stage=s)
        dstate = delayed_state(dopt, names, state, tied, S * k, device)
        versions = {v: read}
        if any(dstate["queues"][g] for g in range(len(names))):
            for n, p in ctx.params:
                p.copy_(read[n])
            dopt.load_state_dict(dstate)
            apply_lr(dopt.optimizer, cfg, lr_at(cfg, S))
            dopt.flush()
            dstate = {**dopt.state_dict(), "step_count": S * k + 1}
            versions[v + 1] = {n: p.detach().clone() for n, p in ctx.params}
        elif any(state.source(n, tied) in state.master for n, _ in ctx.params):
            versions[v + 1] = {n: state.master[state.source(n, tied)].to(device)
                               for n, _ in ctx.params}
            dstate["step_count"] = S * k + 1
        per_stage[s] = {"stage": s, "newest": max(versions), "versions": versions,
                        "optimizer": dstate}
    head = {"format": "asyncpp.pipeline/1", "schedule": ex.schedule_name,
            "num_stages": ex.num_stages, "num_microbatches": ex.num_microbatches,
            "dp_rank": ex.topo.dp_rank, "next_step": S}
    if not ex.merged:  # one stage on this rank: its state at the top level (checkpoint.py)
        ex.load_state_dict({**head, **next(iter(per_stage.values()))})
    else:
        ex.load_state_dict({**head, "stage": sorted(per_stage), "stages": per_stage})



@torch.no_grad()
def newest_weights(ckpt: dict, saved: Config) -> dict[str, Tensor]:
    r"""The weights of ``ckpt`` after every update it holds is applied, by full-model name: a
    torchrun checkpoint's newest version of every stage; a one-process checkpoint's model after
    its queued updates are applied as the pipeline's drain applies them (rate :math:`\eta_S`,
    ``DelayedOptimizer.flush()``), so both give :math:`x_{S+1}` for 2BW. A tied head is
    absent (its tensor is the embedding's)."""
    if saved.model.external is not None:  # resumed in the layout that wrote it only
        return _as_saved(ckpt)
    state = from_checkpoint(ckpt, saved)
    if not any(state.queue.values()):
        return {**state.read, **state.master}
    cpu = torch.device("cpu")
    model = build_model(saved.model_config(), device=cpu, seed=saved.run.seed)
    groups = stage_named_parameters(model, saved.pipeline.stages)
    dopts = [build_stage_optimizer(saved, g, s, cpu) for s, g in enumerate(groups)]
    load_into_simulation(_Loaded(saved, model, dopts, cpu), state)  # queued: no master
    for d in dopts:
        apply_lr(d.optimizer, saved, lr_at(saved, state.step))
        d.flush()
    return {n: p.detach().clone() for g in groups for n, p in g}


def _as_saved(ckpt: dict) -> dict[str, Tensor]:
    """A one-process checkpoint's model; a torchrun one's newest version of every stage of
    replica 0, by the names the stages saved."""
    if "distributed" not in ckpt:
        return ckpt["model"]
    merged: dict[str, Tensor] = {}
    for shard in ckpt["shards"]:
        ex = shard["executor"]
        if int(ex.get("dp_rank", 0)) != 0:
            continue  # every replica holds the same weights
        for st in (ex["stages"].values() if "stages" in ex else [ex]):
            versions = {int(v): ws for v, ws in st["versions"].items()}
            merged.update(versions[int(st["newest"])])
    return merged


@dataclass
class _Loaded:
    """What :func:`load_into_simulation` reads of a backend."""

    cfg: Config
    model: nn.Module
    dopts: list
    device: torch.device
