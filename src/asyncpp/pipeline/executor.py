r"""The pipeline executor: runs a schedule's action list for this rank's stage over
``torch.distributed`` point-to-point messages.

**Weight versions.** The optimizer owns the stage's parameters (the *master*, always the newest
version). A version is a set of tensors that alias a storage nobody writes again: forwards run
``torch.func.functional_call(stage, leaves, x)`` on fresh leaf tensors over the version's
storage (each with its own autograd version counter), so gradients of a step accumulate in
that step's leaves and the weights an in-flight microbatch saved for its backward are never
modified. When an update must keep the version it replaces alive (2BW, PipeDream), the master
first moves to a copy of its storage and the old storage stays with the version; otherwise the
update runs in place. So 2BW keeps 2 copies of the weights, PipeDream stage s keeps P − s, and
GPipe/1F1B keep 1.

**Streaming.** :meth:`PipelineExecutor.run_steps` runs the stage's actions from the lazy
generator :func:`~asyncpp.pipeline.schedules.stage_actions` over a stream of batches and yields
a :class:`StepOutput` as each step completes; the pipeline drains only at the end of the call
(the caller ends calls where the semantics need a quiet pipeline: evaluation, checkpoint,
stop, end of run) or where 2BW's synchronous start/cooldown makes the delay 0.
:meth:`end_after` moves the end of a running call earlier (a stop). Weight versions are freed
by liveness at run time: a version lives while the next forward, an in-flight backward or a
queued Taylor update reads it.

**Updates.** Every stage wraps its optimizer in a ``DelayedOptimizer`` and applies each
accumulated gradient g (computed on version v) with
``DelayedOptimizer.apply_stale(delay, stale_params=x_v)`` — the same code the single-process
simulation runs, so Error Feedback :math:`x_{t+1} = x_t - 2u(t-1) + u(t-2)` and the Taylor
correction :math:`\hat g = g + \lambda g\odot g\odot(x_t - x_v)` are literally shared. Before
it, the gradient is averaged over the stage's data-parallel group, summed with its tied copy
(first ↔ last stage) and clipped by the global norm over all stages if ``max_grad_norm`` is set
(``clip_scope="stage"``: by the stage's own). The tied-weight sum and the norm's scalar
all-reduce are *asynchronous*: they are started when the stage's last backward of the step is
done, and the update is applied once they have completed — at the latest right before the
first forward that reads the version it produces (2BW: the forwards of step t + 2). So in
steady state no stage waits for another at an update; without deferral, the last stage would
wait every step for the first stage to finish that step's backward (a bubble of P − 1
backward slots). A step where the delay schedule says 0 (synchronous start/cooldown) is
applied with delay 0 and the pipeline drains after it, exactly as ``DelayedOptimizer.step``
does at a switch. The deferral changes no number: the streamed run equals the per-step-drain
run bit for bit (tested).

**Communication.** Sends are non-blocking and complete in the background; receives are waited
with the executor's ``timeout``. Consecutive send/receive actions are posted together with one
``batch_isend_irecv`` — on gloo (CPU) as on NCCL (GPU), so the CPU tests run the code path
multi-GPU users run — in the same deterministic order on both peers. The first activation
message of each call carries a small header (dtype, shape); later microbatches of the call
reuse it. A peer that is dead or silent for ``timeout`` seconds raises :class:`PipelineError`
on this rank, which exits and so ends its own peers' waits in turn. On NCCL the
data-parallel and tied-weight reductions read a has-gradient mask back to the host (one
synchronisation per update when dp > 1 or weights are tied); nothing else does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.func import functional_call
from torch.optim import Optimizer

from ..delay import DelayedOptimizer
from ..optim import clip_coefficient, scale_, squared_norm
from . import schedules as S
from .registry import get_spec
from .topology import PipelineTopology

log = logging.getLogger(__name__)

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32]
_HEADER = 10


class PipelineError(RuntimeError):
    """A peer of this rank failed, stalled past the timeout, or broke the protocol."""


def _alias(t: Tensor) -> Tensor:
    """A new tensor over ``t``'s storage with its own autograd version counter."""
    out = torch.empty((0,), dtype=t.dtype, device=t.device)
    with torch.no_grad():
        out.set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    return out


def stage_delay(schedule: str, num_stages: int, stage: int) -> int:
    """The delay τ of a stage's updates: 2BW 1, PipeDream P − 1 − s, GPipe/1F1B 0."""
    spec = get_spec(schedule)
    if not spec.needs_pipeline:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; allowed: "
                         f"{', '.join(S.SCHEDULES)}")
    return spec.stage_delay(num_stages, stage)


@dataclass
class StepOutput:
    r"""What one stage reports when it completes step ``step`` (its last update of the step
    has been issued). Everything stays on the device; nothing here synchronises the host.

    ``loss``: on the last stage, the step's loss (mean over its m microbatches, this
    data-parallel replica), a float64 0-dim tensor; ``None`` on the other stages.
    ``grad_sq``: float64 tensor of one entry per update of the step (PipeDream: m), this
    stage's :math:`\|g_s\|^2` after the data-parallel mean and before clipping; a weight tied
    between the first and the last stage counts once, on the first stage (as their sum).
    """

    step: int
    loss: Tensor | None
    grad_sq: Tensor


@dataclass
class _PendingUpdate:
    """An update whose gradient is ready but which waits for its reductions, or for the
    moment a forward needs the version it produces (see ``_apply_pending``)."""

    action: S.OptimizerStep
    grads: dict
    stale: dict
    norm_work: object = None
    norm_sq: Tensor | None = None
    tie_works: list = field(default_factory=list)
    tie_done: Callable | None = None

    def ready(self) -> bool:
        works = [w for w in [self.norm_work, *self.tie_works] if w is not None]
        return all(w.is_completed() for w in works)


class PipelineExecutor:
    """Run pipeline schedule ``schedule`` for this rank's ``stage``.

    Args:
        stage: this rank's ``nn.Module``. The first stage takes a microbatch of the input
            batch; others take the previous stage's output (one floating tensor). The last
            stage's output goes to ``loss_fn(output, targets)``; without ``loss_fn`` the last
            stage is called as ``stage(x, targets)`` and must return the scalar loss.
        optimizer: the stage's optimizer (e.g. from ``build_optimizer`` over
            ``stage.named_parameters()``), or a ``DelayedOptimizer`` around it carrying the
            correction ("ef", "taylor", "nesterov") and synchronous start/cooldown. Its delay
            must be the schedule's (:func:`stage_delay`); a bare optimizer is wrapped with it.
        schedule: "gpipe", "1f1b", "pipedream", "2bw" or "wpipe" (each rank one partition).
        num_microbatches: m; every batch is split into m equal microbatches along dim 0.
        num_stages: P (defaults to ``topology.num_stages``; 1 without a process group).
        topology: a :class:`PipelineTopology`; created (collectively) when omitted.
        mesh: optional ``DeviceMesh`` ("dp", "pp") used when the topology is created here.
        loss_fn: see ``stage``.
        tied_parameters: local parameter name → tie key, for weights held by both the first
            and the last stage (default: ``stage.tied_parameters`` if present).
        max_grad_norm: clip the global gradient norm (all stages) to this value, as
            ``torch.nn.utils.clip_grad_norm_`` on the whole model.
        timeout: seconds to wait for any message or collective before raising
            :class:`PipelineError`.
        reduce_dp_gradients: average gradients over the data-parallel group here (set False
            when the optimizer does it itself).
        on_gradients: optional callback ``(update_index, {name: grad})`` after reduction and
            clipping, before the update.
        clip_scope: with ``max_grad_norm``, ``"global"`` clips by the norm over all stages
            (one asynchronous scalar all-reduce per update), ``"stage"`` by each stage's own.
        before_update: optional callback ``(applied_at)`` right before each update is applied,
            with the simulated step a(u) it belongs to (:attr:`OptimizerStep.applied_at`),
            e.g. to set that step's learning rate.
        eager_updates: apply every update as soon as its step completes on this stage (waiting
            for its reductions) instead of deferring it — for callers that inspect the
            optimizer after each step (update tracking); same results, less overlap.
        forward_fn: optional replacement for ``functional_call(stage, weights, args)`` with
            the same signature ``(stage, weights, args)``, e.g. a ``torch.compile``-d one.
        config: extra settings (e.g. the training config as a dict) that must agree on all
            ranks; compared at start-up together with the executor's own.
    """

    def __init__(
        self,
        stage: nn.Module,
        optimizer: Optimizer | DelayedOptimizer,
        *,
        schedule: str,
        num_microbatches: int,
        num_stages: int | None = None,
        topology: PipelineTopology | None = None,
        mesh=None,
        loss_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
        tied_parameters: Mapping[str, str] | None = None,
        max_grad_norm: float | None = None,
        timeout: float = 600.0,
        reduce_dp_gradients: bool = True,
        on_gradients: Callable[[int, dict[str, Tensor]], None] | None = None,
        config: Mapping | None = None,
        clip_scope: str = "global",
        before_update: Callable[[int], None] | None = None,
        forward_fn: Callable | None = None,
        eager_updates: bool = False,
    ) -> None:
        spec = get_spec(schedule)
        if not spec.needs_pipeline:
            raise ValueError(
                f"unknown pipeline schedule {schedule!r}; allowed: {', '.join(S.SCHEDULES)}"
            )
        name = spec.name
        self.spec = spec
        if clip_scope not in ("global", "stage"):
            raise ValueError(f"clip_scope must be 'global' or 'stage', got {clip_scope!r}")
        if not isinstance(num_microbatches, int) or num_microbatches < 1:
            raise ValueError(f"num_microbatches must be a positive integer, got "
                             f"{num_microbatches!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if max_grad_norm is not None and not (isinstance(max_grad_norm, (int, float))
                                              and max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be a positive number, got {max_grad_norm!r}")
        if not isinstance(stage, nn.Module):
            raise ValueError(f"stage must be an nn.Module, got {type(stage).__name__}")
        self.schedule_name = name
        self.num_microbatches = num_microbatches
        self.timeout = float(timeout)
        self.max_grad_norm = max_grad_norm
        self.clip_scope = clip_scope
        self.before_update = before_update
        self.forward_fn = forward_fn
        self.eager_updates = eager_updates
        self.loss_fn = loss_fn
        self.on_gradients = on_gradients
        self.stage = stage
        self._params = [(n, p) for n, p in stage.named_parameters()]
        if not self._params:
            raise ValueError("the stage has no parameters; give every stage at least one layer")
        self.device = self._params[0][1].device

        if topology is None:
            if num_stages is None:
                if mesh is not None:
                    dims = list(mesh.mesh_dim_names or ())
                    if "pp" not in dims:
                        raise ValueError(f"the device mesh needs a dimension named 'pp', got "
                                         f"{tuple(dims)}")
                    num_stages = mesh.size(dims.index("pp"))
                else:
                    num_stages = dist.get_world_size() if dist.is_initialized() else 1
            self._check_config_early(name, num_stages, num_microbatches, config)
            topology = PipelineTopology.create(num_stages, mesh=mesh, timeout=timeout)
        elif num_stages is not None and num_stages != topology.num_stages:
            raise ValueError(f"num_stages={num_stages} disagrees with the topology's "
                             f"{topology.num_stages}")
        self.topo = topology
        P, s = topology.num_stages, topology.stage
        self.num_stages = P
        if topology.distributed and self.device.type == "cuda":
            backend = dist.get_backend(topology.world_group)
            if backend == "gloo":
                raise ValueError("CUDA stages need the NCCL backend; init_distributed picks it "
                                 "from the device")

        self.reduce_dp_gradients = reduce_dp_gradients
        # Validate locally, then share the verdict: a mistake on one rank stops every rank
        # with the same message instead of leaving the others waiting.
        try:
            self._setup(optimizer, tied_parameters, name, P, s)
            local_error = None
        except ValueError as e:
            local_error = str(e)
        if not topology.distributed and local_error:
            raise ValueError(local_error)
        self._check_config(config, local_error)
        self._sync_start_weights()

        self._versions: dict[int, dict[str, Tensor]] = {0: self._alias_master()}
        self._newest = 0
        self.next_step = 0
        self._last_norm_sq: Tensor | None = None
        self._act_meta: tuple | None = None
        self._end: int | None = None
        self._max_forwarded = -1
        self._next_item = (0, 0)
        self._pending: list[_PendingUpdate] = []
        self._inflight_versions: list[int] = []
        self._pred = None
        self.updates_issued = 0

    @property
    def last_grad_norm(self) -> float | None:
        """The global gradient norm of the last update (``clip_scope='global'`` with
        ``max_grad_norm``), fetched from the device (a host synchronisation: for tests and
        debugging, not the training loop)."""
        return None if self._last_norm_sq is None else math.sqrt(float(self._last_norm_sq))

    def _setup(self, optimizer, tied_parameters, name: str, P: int, s: int) -> None:
        """Rank-local validation: the delay-core wrapper and the tied weights."""
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
            if windows and not self.spec.sync_windows:
                raise ValueError("synchronous start/cooldown is supported with the 2bw schedule "
                                 f"(and trivially gpipe/1f1b), not {name}; set them to 0")
        elif isinstance(optimizer, Optimizer):
            dopt = DelayedOptimizer(optimizer, delay=tau)
        else:
            raise ValueError(f"optimizer must be a torch.optim.Optimizer or a DelayedOptimizer, "
                             f"got {type(optimizer).__name__}")
        self.optimizer = dopt
        names = {id(p): n for n, p in self._params}
        for group in dopt.param_groups:
            for p in group["params"]:
                if id(p) not in names:
                    raise ValueError(
                        "the optimizer holds a parameter that is not in this stage; build it "
                        "over stage.named_parameters()"
                    )
        self._name_of = names
        if tied_parameters is None:
            tied_parameters = getattr(self.stage, "tied_parameters", None) or {}
        self.tied = {k: v for k, v in dict(tied_parameters).items()}
        for k in self.tied:
            if k not in dict(self._params):
                raise ValueError(f"tied parameter {k!r} is not a parameter of this stage")
        if P == 1:
            self.tied = {}
        if self.tied and not self.spec.tied_weights:
            raise ValueError("tied first/last-stage weights need equal delays on both stages; "
                             f"{name} gives them P-1 and 0 — untie them or use 2bw")
        if self.clip_scope == "stage" and self.tied and self.max_grad_norm is not None:
            raise ValueError("clip_scope='stage' with weights tied between the first and the last "
                             "stage has no single-model equivalent; use clip_scope='global'")

    # -- configuration ---------------------------------------------------------------------
    def _describe(self, config) -> dict:
        dopt = self.optimizer
        opt = dopt.optimizer
        defaults = {k: repr(v) for k, v in sorted(opt.defaults.items())}
        return {
            "schedule": self.schedule_name, "num_stages": self.num_stages,
            "num_microbatches": self.num_microbatches, "dp_size": self.topo.dp_size,
            "max_grad_norm": self.max_grad_norm, "clip_scope": self.clip_scope,
            "timeout": self.timeout,
            "reduce_dp_gradients": self.reduce_dp_gradients,
            "correction": dopt.correction, "taylor_lambda": dopt.taylor_lambda,
            "sync_start": dopt.schedule.sync_start, "sync_cooldown": dopt.schedule.sync_cooldown,
            "total_steps": dopt.schedule.total_steps, "optimizer": type(opt).__name__,
            "optimizer_defaults": defaults,
            "param_dtypes": sorted({str(p.dtype) for _, p in self._params}),
            "device_type": self.device.type,
            "config": json.loads(json.dumps(dict(config or {}), sort_keys=True, default=repr)),
        }

    @staticmethod
    def _check_config_early(name, num_stages, m, config) -> None:
        """Before creating groups (whose creation must match across ranks), compare the
        settings that shape them."""
        if not dist.is_initialized():
            return
        mine = {"schedule": name, "num_stages": num_stages, "num_microbatches": m,
                "config": json.loads(json.dumps(dict(config or {}), sort_keys=True,
                                                default=repr))}
        _compare_across_ranks(mine, None)

    def _check_config(self, config, local_error: str | None = None) -> None:
        if not self.topo.distributed:
            return
        g = self.topo.world_group
        errors = [None] * dist.get_world_size(g)
        dist.all_gather_object(errors, local_error, group=g)
        bad = [(r, e) for r, e in enumerate(errors) if e]
        if bad:
            ranks = dist.get_process_group_ranks(g)
            r, e = bad[0]
            raise ValueError(f"pipeline set-up failed on rank {ranks[r]}: {e}")
        mine = self._describe(config)
        _compare_across_ranks(mine, g)
        # Topology and tied weights.
        entry = (self.topo.stage, self.topo.dp_rank,
                 sorted((k, tuple(dict(self._params)[n].shape), str(dict(self._params)[n].dtype))
                        for n, k in self.tied.items()))
        everyone = [None] * dist.get_world_size(self.topo.world_group)
        dist.all_gather_object(everyone, entry, group=self.topo.world_group)
        places = [(e[0], e[1]) for e in everyone]
        if len(set(places)) != len(places):
            raise ValueError(f"two ranks claim the same (stage, dp rank): {places}")
        P = self.num_stages
        if P > 1:
            first = [e[2] for e in everyone if e[0] == 0]
            last = [e[2] for e in everyone if e[0] == P - 1]
            middle = [e[2] for e in everyone if 0 < e[0] < P - 1 and e[2]]
            if middle or any(f != first[0] for f in first) or any(x != first[0] for x in last):
                raise ValueError(
                    "tied parameters must be present, with equal keys and shapes, on the first "
                    f"and the last stage only; got first={first[0]}, last={last[0]}"
                    f"{', middle stages too' if middle else ''}"
                )

    @torch.no_grad()
    def _sync_start_weights(self) -> None:
        """Start every data-parallel replica and both tied copies from the same weights:
        broadcast from DP rank 0 and from the first stage."""
        t = self.topo
        if not t.distributed:
            return
        if t.dp_group is not None:
            src = dist.get_process_group_ranks(t.dp_group)[0]
            for _, p in self._params:
                self.wait(dist.broadcast(p.data, src=src, group=t.dp_group, async_op=True),
                           "the start-up weight broadcast", self._others(t.dp_group))
        if self.tied and t.tie_group is not None:
            for n in sorted(self.tied, key=lambda k: self.tied[k]):
                p = dict(self._params)[n]
                self.wait(dist.broadcast(p.data, src=t.stage_ranks[0], group=t.tie_group,
                                          async_op=True), "the tied-weight broadcast",
                          self._others(t.tie_group))

    # -- weights ---------------------------------------------------------------------------
    def _alias_master(self) -> dict[str, Tensor]:
        return {n: _alias(p.detach()) for n, p in self._params}

    def version_for_step(self, step: int) -> int:
        """The version label the forwards of ``step`` use on this stage (microbatch 0)."""
        return S.version_of(self.schedule_name, self.num_stages, self.num_microbatches,
                            self.topo.stage, step, 0, self._sync_predicate())

    def live_versions(self) -> list[int]:
        """Labels of the weight versions this stage holds now."""
        return sorted(self._versions)

    def weights(self, version: int | None = None) -> dict[str, Tensor]:
        """The tensors of weight version ``version`` by parameter name (default: the version
        the next step's first microbatch uses). Treat them as read-only; the stage's own
        parameters are the newest version."""
        v = self.version_for_step(self.next_step) if version is None else version
        if v not in self._versions:
            raise ValueError(f"version {v} is not held; live versions: {self.live_versions()}")
        return dict(self._versions[v])

    def _sync_predicate(self):
        if not self.spec.sync_windows:
            return None
        sched = self.optimizer.schedule
        if not (sched.sync_start or sched.sync_cooldown):
            return None
        return lambda t: sched.delay_at(t) == 0

    # -- communication -------------------------------------------------------------------------
    def wait(self, work, what: str, peer=None) -> None:
        """Wait for ``work`` (a ``torch.distributed`` work handle) up to the executor's timeout;
        :class:`PipelineError` naming this rank, ``what`` and ``peer`` (a rank, or the list of
        ranks a collective waits for) if it does not finish."""
        if work is None:
            return
        try:
            ok = work.wait(timeout=timedelta(seconds=self.timeout))
        except Exception as e:  # gloo/NCCL report timeouts and closed peers as RuntimeError
            raise self._error(what, peer, e) from e
        if ok is False:
            raise self._error(what, peer, "timed out")

    def _error(self, what: str, peer, cause) -> PipelineError:
        t = self.topo
        who = f"rank {dist.get_rank()} (stage {t.stage}, dp {t.dp_rank})" if t.distributed \
            else "this process"
        if isinstance(peer, (list, tuple)):
            src = (f" from rank {peer[0]}" if len(peer) == 1 else
                   f" from ranks {', '.join(map(str, peer))}") if peer else ""
        else:
            src = f" from rank {peer}" if peer is not None else ""
        return PipelineError(
            f"{who}: {what}{src} did not complete within the {self.timeout:g} s timeout or the "
            f"peer is gone — a peer process died, stalled, or runs a different configuration "
            f"({cause})"
        )

    def _others(self, group) -> list[int]:
        """The global ranks of ``group`` other than this one (whom a collective waits for)."""
        if group is None or not self.topo.distributed:
            return []
        me = dist.get_rank()
        return [r for r in dist.get_process_group_ranks(group) if r != me]

    def _post(self, ops: list[tuple[str, Tensor, int]]) -> list:
        """Post sends/receives (op, tensor, global peer rank) together with one
        ``batch_isend_irecv`` — the same call on gloo (CPU) and NCCL (GPU), so the CPU tests
        run the code multi-GPU users run. Returns one work per op (NCCL may return a single
        work for the whole batch; callers handle both)."""
        g = self.topo.pp_group
        p2p = [dist.P2POp(dist.isend if op == "send" else dist.irecv, tensor, peer, g)
               for op, tensor, peer in ops]
        try:
            return dist.batch_isend_irecv(p2p)
        except Exception as e:
            raise self._error("posting sends/receives", ops[0][2], e) from e

    def _header(self, x: Tensor) -> Tensor:
        if x.ndim > _HEADER - 2 or x.dtype not in _DTYPES:
            raise ValueError(f"stage outputs must be tensors of ≤ {_HEADER - 2} dims with dtype "
                             f"in {_DTYPES}, got {x.dtype} of shape {tuple(x.shape)}")
        h = [_DTYPES.index(x.dtype), x.ndim, *x.shape] + [0] * (_HEADER - 2 - x.ndim)
        return torch.tensor(h, dtype=torch.int64, device=self.device)

    def _communicate(self, group: list, st: dict) -> None:
        """Post one run of consecutive Send/Recv actions together, then wait for the
        receives (sends complete in the background and are waited later)."""
        t = self.topo
        ops, recvs = [], []
        for a in group:
            peer = t.stage_ranks[a.peer]
            if isinstance(a, S.Send):
                tensor = st["out_msgs"].pop((a.kind, a.step, a.mb))
                if a.kind == S.ACTIVATION and not st["header_sent"]:
                    st["header_sent"] = True
                    hdr = self._header(tensor)
                    st["send_works"].append((self._post([("send", hdr, peer)]), hdr, [peer]))
                ops.append(("send", tensor, peer))
                continue
            if a.kind == S.ACTIVATION:
                if not st["header_recvd"]:
                    hdr = torch.empty(_HEADER, dtype=torch.int64, device=self.device)
                    for w in self._post([("recv", hdr, peer)]):
                        self.wait(w, "the activation header", peer)
                    h = hdr.tolist()
                    if not (0 <= h[0] < len(_DTYPES) and 0 <= h[1] <= _HEADER - 2):
                        raise PipelineError(f"malformed activation header {h} from rank {peer}")
                    self._act_meta = (_DTYPES[h[0]], tuple(h[2:2 + h[1]]))
                    st["header_recvd"] = True
                dtype, shape = self._act_meta
            else:
                out = st["inflight"][(a.step, a.mb)][1]
                dtype, shape = out.dtype, tuple(out.shape)
            buf = torch.empty(shape, dtype=dtype, device=self.device)
            ops.append(("recv", buf, peer))
            recvs.append((len(ops) - 1, a, buf, peer))
        works = self._post(ops)
        if len(works) != len(ops):
            # A coalesced batch (NCCL): one handle for all; wait for it now.
            for w in works:
                self.wait(w, "a batched pipeline exchange", sorted({o[2] for o in ops}))
            works = [None] * len(ops)
        st["send_works"].append(([w for (op, _, _), w in zip(ops, works) if op == "send"],
                                 [o[1] for o in ops if o[0] == "send"],
                                 sorted({o[2] for o in ops if o[0] == "send"})))
        for idx, a, buf, peer in recvs:
            self.wait(works[idx], f"the {a.kind} of step {a.step} microbatch {a.mb}", peer)
            st["in_msgs"][(a.kind, a.step, a.mb)] = buf
        self._drain_sends(st, keep=4 * self.num_stages)

    def _drain_sends(self, st: dict, keep: int = 0) -> None:
        """Release finished sends (their tensors), oldest first; wait for the oldest ones
        while more than ``keep`` batches of sends are outstanding."""
        q = st["send_works"]
        while q:
            works, _, peers = q[0]
            if len(q) > keep:
                for w in works:
                    self.wait(w, "a send", peers)
            elif not all(w is None or w.is_completed() for w in works):
                break
            q.pop(0)

    # -- running ---------------------------------------------------------------------------------
    def _split(self, batch, what: str) -> list:
        m = self.num_microbatches
        if not isinstance(batch, Tensor):
            raise ValueError(f"the {what} of a batch must be a tensor, got {type(batch).__name__}")
        if batch.shape[0] % m:
            raise ValueError(f"a batch of {batch.shape[0]} {what} cannot be split into "
                             f"{m} equal microbatches; use a batch size divisible by {m}")
        return [x.to(self.device, non_blocking=True) for x in torch.tensor_split(batch, m, dim=0)]

    def train_steps(self, batches: Iterable) -> list[float]:
        """Run len(batches) optimizer steps and drain; ``batches`` yields ``(inputs,
        targets)`` (the first stage reads only inputs, the last only targets; others may pass
        ``None``). Returns the loss of each step (mean over its microbatches and over
        data-parallel replicas) on every rank — one all-reduce and one host synchronisation
        per call. Steps chain across calls (weight versions and delayed gradients carry over);
        :meth:`run_steps` streams without the drain and the synchronisation."""
        batches = list(batches)
        if not batches:
            return []
        outs = list(self.run_steps(batches, len(batches)))
        losses = torch.zeros(len(outs), dtype=torch.float64, device=self.device)
        if self.topo.is_last:
            losses.copy_(torch.stack([o.loss for o in outs]))
        return self._gather_losses(losses, self.topo.is_last)

    def end_after(self, step: int) -> None:
        """Make the running :meth:`run_steps` stop after step ``step`` (drain there). Every
        rank must ask for the same step, and no stage may have started a later step: the
        caller decides it from information every rank shares, early enough (the trainer
        decides ``lookahead + 1`` steps ahead, see :meth:`ScheduleSpec.lookahead_steps`)."""
        if self._end is None:
            raise ValueError("end_after() is only meaningful while run_steps() is running")
        if step + 1 > self._end:
            return
        if step < self._max_forwarded:
            raise PipelineError(
                f"cannot end the pipeline after step {step}: this stage already started step "
                f"{self._max_forwarded} (the stop was decided too late)")
        self._end = step + 1

    def run_steps(self, batches: Iterable, num_steps: int) -> Iterator[StepOutput]:
        r"""Stream up to ``num_steps`` optimizer steps without draining between them: pull
        step t's ``(inputs, targets)`` from ``batches`` when this stage first needs it (every
        stage pulls every step's batch, in order, so iterators that advance a sampler stay in
        step on all ranks), and yield a :class:`StepOutput` as this stage completes each step.
        The pipeline drains once, at the end (after ``num_steps`` steps, or where
        :meth:`end_after` moved the end). Deferred updates are all applied by then, so
        :meth:`evaluate`, :meth:`state_dict` and the next call see a quiet pipeline.

        Updates: the gradient of step t is reduced (data-parallel mean; tied-weight sum and
        global-norm scalar as asynchronous all-reduces) as soon as this stage's last backward of
        t is done, and the update is applied when its reductions have completed or, at the
        latest, right before the first forward that reads the version it produces (2BW:
        the forwards of step t + 2). So no stage waits for another at an update unless the
        schedule makes it (PipeDream with global clipping: the last stage applies each update
        before its next forward, so it waits for the first stage's backward of it)."""
        if not isinstance(num_steps, int) or num_steps < 0:
            raise ValueError(f"num_steps must be a non-negative integer, got {num_steps!r}")
        if num_steps == 0:
            return
        t0 = self.next_step
        self._end = t0 + num_steps
        self._pred = self._sync_predicate()  # read by every update's liveness check
        gen = S.stage_actions(self.schedule_name, self.num_stages, self.num_microbatches,
                              self.topo.stage, t0, lambda: self._end,
                              sync_steps=self._pred)
        first, last = self.topo.is_first, self.topo.is_last
        it = iter(batches)
        st = {"inflight": {}, "accum": {}, "in_msgs": {}, "out_msgs": {}, "send_works": [],
              "data": {}, "losses": {}, "grad_sq": {}, "pulled": t0 - 1,
              "header_sent": False, "header_recvd": False}
        k = self.spec.updates_per_step(self.num_microbatches)
        scale = 1.0 / (self.num_microbatches // k)
        comm: list = []
        try:
            for a in gen:
                if isinstance(a, (S.Send, S.Recv)):
                    comm.append(a)
                    continue
                if comm:
                    self._communicate(comm, st)
                    comm = []
                if isinstance(a, S.Forward):
                    while st["pulled"] < a.step:
                        st["pulled"] += 1
                        b = next(it, None)
                        if not (isinstance(b, (tuple, list)) and len(b) == 2):
                            raise ValueError(
                                f"step {st['pulled']}: each batch must be a pair (inputs, "
                                f"targets), got {type(b).__name__}"
                                + (" (the batches ran out)" if b is None else ""))
                        st["data"][st["pulled"]] = (
                            self._split(b[0], "inputs") if first else None,
                            self._split(b[1], "targets") if last else None)
                    self._apply_pending(need_version=a.version)
                    self._forward(a, st, scale)
                elif isinstance(a, S.Backward):
                    self._backward(a, st)
                else:
                    self._launch_update(a, st)
                    if self.eager_updates:
                        self._apply_pending(need_version=math.inf)
                    done = a.mb is None or a.mb == self.num_microbatches - 1
                    if done:
                        yield StepOutput(a.step, st["losses"].pop(a.step, None),
                                         torch.stack(st["grad_sq"].pop(a.step)))
                self._apply_pending(need_version=None)
            if comm:
                self._communicate(comm, st)
            self._apply_pending(need_version=math.inf)
            self._drain_sends(st)
            self.next_step = self._end
        finally:
            self._end = None

    def _gather_losses(self, losses: torch.Tensor, last: bool) -> list[float]:
        """Per-step losses on every rank: the last stage's (mean over DP replicas) are summed
        into everyone's buffer by one all-reduce; other stages contribute zeros."""
        if self.topo.distributed:
            if not last:
                losses.zero_()
            else:
                losses /= self.topo.dp_size
            self.wait(dist.all_reduce(losses, group=self.topo.world_group, async_op=True),
                       "the loss all-reduce", self._others(self.topo.world_group))
        return [float(x) for x in losses.tolist()]

    def _key(self, step: int, mb: int):
        return (step, mb) if self.spec.per_microbatch_updates else (step,)

    def _forward(self, a: S.Forward, st, scale: float) -> None:
        key = self._key(a.step, a.mb)
        leaves = st["accum"].get(key)
        if leaves is None:
            version = self._versions[a.version]
            leaves = {n: (_alias(version[n]).requires_grad_(True) if p.requires_grad
                          else version[n]) for n, p in self._params}
            st["accum"][key] = (leaves, version)
        else:
            leaves = leaves[0]
        xs, ys = st["data"][a.step]
        if self.topo.is_first:
            x = xs[a.mb]
        else:
            x = st["in_msgs"].pop((S.ACTIVATION, a.step, a.mb))
            if x.is_floating_point():
                x.requires_grad_(True)
        call = self.forward_fn or functional_call
        with torch.enable_grad():
            if self.topo.is_last:
                y = ys[a.mb]
                if self.loss_fn is not None:
                    out = self.loss_fn(call(self.stage, leaves, (x,)), y)
                else:
                    out = call(self.stage, leaves, (x, y))
                if not (isinstance(out, Tensor) and out.numel() == 1):
                    raise ValueError("the last stage must produce a scalar loss (give loss_fn, "
                                     "or make stage(x, targets) return the loss)")
                contrib = out.detach().double().reshape(()) * (1.0 / self.num_microbatches)
                prev = st["losses"].get(a.step)
                st["losses"][a.step] = contrib if prev is None else prev + contrib
                out = out * scale
            else:
                out = call(self.stage, leaves, (x,))
                if not isinstance(out, Tensor) or not out.is_floating_point():
                    raise ValueError("a non-last stage must return one floating-point tensor")
                st["out_msgs"][(S.ACTIVATION, a.step, a.mb)] = out.detach().contiguous()
        st["inflight"][(a.step, a.mb)] = (x, out, a.version)
        self._max_forwarded = max(self._max_forwarded, a.step)
        self._next_item = (a.step, a.mb + 1) if a.mb + 1 < self.num_microbatches \
            else (a.step + 1, 0)
        if a.mb == self.num_microbatches - 1:
            st["data"].pop(a.step, None)
        self._inflight_versions = sorted(v for *_, v in st["inflight"].values())

    def _backward(self, a: S.Backward, st) -> None:
        x, out, _ = st["inflight"].pop((a.step, a.mb))
        if self.topo.is_last:
            torch.autograd.backward(out)
        else:
            grad = st["in_msgs"].pop((S.GRADIENT, a.step, a.mb))
            torch.autograd.backward(out, grad_tensors=grad)
        if not self.topo.is_first:
            g = x.grad if x.grad is not None else torch.zeros_like(x)
            st["out_msgs"][(S.GRADIENT, a.step, a.mb)] = g.contiguous()
        self._inflight_versions = sorted(v for *_, v in st["inflight"].values())

    # -- updates -------------------------------------------------------------------------------
    def _needed_from(self) -> int:
        """The oldest version still to be read: by the next forward (the successor of the last
        forwarded microbatch, whichever call runs it), an in-flight backward, or a queued
        update's Taylor correction."""
        t, i = self._next_item
        v = S.version_of(self.schedule_name, self.num_stages, self.num_microbatches,
                         self.topo.stage, t, i, self._pred)
        taylor = [p.action.version for p in self._pending] \
            if self.optimizer.correction == "taylor" else []
        return min([v, *self._inflight_versions, *taylor])

    @torch.no_grad()
    def _launch_update(self, a: S.OptimizerStep, st) -> None:
        """Collect the gradient of update ``a``, reduce it over data-parallel replicas, start
        the tied-weight and global-norm all-reduces, and queue the update."""
        leaves, stale = st["accum"].pop(self._key(a.step, a.mb if a.mb is not None else 0))
        grads = {n: (leaves[n].grad if p.requires_grad else None) for n, p in self._params}
        t = self.topo
        names = [n for n, _ in self._params]
        if t.dp_group is not None and self.reduce_dp_gradients:
            self._all_reduce_mean(grads, names, t.dp_group, t.dp_size, "data-parallel")
        pend = _PendingUpdate(a, grads, stale)
        tied = sorted(self.tied, key=lambda n: self.tied[n]) \
            if (self.tied and t.tie_group is not None) else []
        if tied:
            pend.tie_works, pend.tie_done = self._all_reduce_async(grads, tied, t.tie_group,
                                                                  "tied-weight")
        # This stage's share of the squared norm: the tied sum counts once, on the first
        # stage, which needs the tied all-reduce first (the last stage launched it when it
        # finished the same step, earlier).
        skip = set(self.tied) if (t.is_last and t.num_stages > 1) else set()
        if tied and t.is_first:
            for w in pend.tie_works:
                self.wait(w, "the tied-weight all-reduce", self._others(t.tie_group))
            pend.tie_done()
            pend.tie_works, pend.tie_done = [], None
        sq = squared_norm([grads[n] for n in names if n not in skip and grads[n] is not None],
                          device=self.device)
        st["grad_sq"].setdefault(a.step, []).append(sq)
        if self.max_grad_norm is not None:
            if self.clip_scope == "global" and t.pp_group is not None and t.num_stages > 1:
                total = sq.clone()
                pend.norm_work = dist.all_reduce(total, group=t.pp_group, async_op=True)
                pend.norm_sq = total
            else:
                pend.norm_sq = sq
        self._pending.append(pend)

    def _apply_pending(self, need_version) -> None:
        """Apply queued updates in order: all whose reductions are done, and — waiting for
        them — every one up to the update producing ``need_version`` (``math.inf``: all)."""
        while self._pending:
            pend = self._pending[0]
            must = need_version is not None and pend.action.update < need_version
            if not (must or pend.ready()):
                break
            self._pending.pop(0)
            self._apply(pend)

    @torch.no_grad()
    def _apply(self, pend: _PendingUpdate) -> None:
        a, grads = pend.action, pend.grads
        for w in pend.tie_works:
            self.wait(w, "the tied-weight all-reduce", self._others(self.topo.tie_group))
        if pend.tie_done is not None:
            pend.tie_done()
        if pend.norm_sq is not None:
            self.wait(pend.norm_work, "the gradient-norm all-reduce",
                      self._others(self.topo.pp_group))
            self._last_norm_sq = pend.norm_sq
            scale_([g for g in grads.values() if g is not None],
                   clip_coefficient(pend.norm_sq, self.max_grad_norm))
        if self.on_gradients is not None:
            self.on_gradients(a.update, {n: g for n, g in grads.items() if g is not None})
        if self._newest >= self._needed_from():  # the version it replaces is still read
            for _, p in self._params:
                p.data = p.data.clone()
        for n, p in self._params:
            p.grad = grads[n]
        dopt = self.optimizer
        stale_params = None
        if dopt.correction == "taylor":
            stale_params = [[pend.stale[self._name_of[id(p)]] for p in g["params"]]
                            for g in dopt.param_groups]
        dopt.step_count = a.applied_at
        if self.before_update is not None:
            self.before_update(a.applied_at)
        dopt.apply_stale(a.delay, stale_params=stale_params)
        for _, p in self._params:
            p.grad = None
        self._newest = a.new_version
        self._versions[a.new_version] = self._alias_master()
        self.updates_issued += 1
        need = self._needed_from()
        for v in [v for v in self._versions if v < need and v != self._newest]:
            del self._versions[v]

    def _all_reduce_mean(self, grads, names, group, divisor, what) -> None:
        works, finish = self._all_reduce_async(grads, names, group, what, divisor)
        for w in works:
            self.wait(w, f"the {what} all-reduce", self._others(group))
        finish()

    def _all_reduce_async(self, grads, names, group, what, divisor: int = 1):
        """Start the sum (÷ ``divisor``) of ``grads[names]`` over ``group``, one flat buffer
        per dtype plus a has-gradient mask; returns (works, finish) — call ``finish()`` after
        the works complete to write the results back into ``grads``."""
        present = torch.tensor([grads[n] is not None for n in names], dtype=torch.float64,
                               device=self.device)
        params = dict(self._params)
        by_dtype: dict = {}
        for n in names:
            g = grads[n] if grads[n] is not None else torch.zeros_like(params[n])
            by_dtype.setdefault(g.dtype, []).append((n, g))
        works = [dist.all_reduce(present, group=group, async_op=True)]
        flats = []
        for items in by_dtype.values():
            flat = torch.cat([g.reshape(-1) for _, g in items])
            works.append(dist.all_reduce(flat, group=group, async_op=True))
            flats.append((flat, items))

        def finish() -> None:
            for flat, items in flats:
                if divisor != 1:
                    flat /= divisor
                off = 0
                for n, g in items:
                    grads[n] = flat[off:off + g.numel()].view_as(g).clone()
                    off += g.numel()
            for n, c in zip(names, present.tolist()):
                if c == 0:
                    grads[n] = None

        return works, finish

    # -- evaluation --------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, batches: Iterable, version: int | None = None) -> list[float]:
        """Forward-only losses of ``batches`` (same format as :meth:`train_steps`) on one
        weight version (default: the newest, i.e. the stage's parameters), averaged over
        microbatches and data-parallel replicas; returned on every rank."""
        batches = list(batches)
        weights = self._versions[self._newest if version is None else version] \
            if (version is None or version in self._versions) else None
        if weights is None:
            raise ValueError(f"version {version} is not held; live: {self.live_versions()}")
        first, last, s = self.topo.is_first, self.topo.is_last, self.topo.stage
        st = {"inflight": {}, "in_msgs": {}, "out_msgs": {}, "send_works": [],
              "header_sent": False, "header_recvd": False}
        losses = torch.zeros(len(batches), dtype=torch.float64, device=self.device)
        call = self.forward_fn or functional_call
        for k, b in enumerate(batches):
            xs = self._split(b[0], "inputs") if first else None
            ys = self._split(b[1], "targets") if last else None
            for i in range(self.num_microbatches):
                if not first:
                    self._communicate([S.Recv(S.ACTIVATION, k, i, s - 1)], st)
                    x = st["in_msgs"].pop((S.ACTIVATION, k, i))
                else:
                    x = xs[i]
                if last:
                    if self.loss_fn is not None:
                        loss = self.loss_fn(call(self.stage, weights, (x,)), ys[i])
                    else:
                        loss = call(self.stage, weights, (x, ys[i]))
                    losses[k] += loss.double().reshape(()) / self.num_microbatches
                else:
                    out = call(self.stage, weights, (x,)).contiguous()
                    st["out_msgs"][(S.ACTIVATION, k, i)] = out
                    self._communicate([S.Send(S.ACTIVATION, k, i, s + 1)], st)
        self._drain_sends(st)
        return self._gather_losses(losses, last)

    # -- checkpoints -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything this rank needs to resume: every live weight version (the newest is the
        stage's parameters), the DelayedOptimizer (wrapped optimizer + EF memory + counters),
        the next step and the layout. Save one file per rank."""
        return {
            "format": "asyncpp.pipeline/1",
            "schedule": self.schedule_name, "num_stages": self.num_stages,
            "num_microbatches": self.num_microbatches, "stage": self.topo.stage,
            "dp_rank": self.topo.dp_rank, "next_step": self.next_step, "newest": self._newest,
            "versions": {v: {n: t.detach().clone() for n, t in ws.items()}
                         for v, ws in self._versions.items()},
            "optimizer": self.optimizer.state_dict(),
        }

    @torch.no_grad()
    def load_state_dict(self, state: Mapping) -> None:
        """Restore :meth:`state_dict` (from the same stage of the same layout)."""
        if state.get("format") != "asyncpp.pipeline/1":
            raise ValueError("not an asyncpp pipeline checkpoint (missing format tag)")
        mine = (self.schedule_name, self.num_stages, self.num_microbatches, self.topo.stage)
        theirs = (state["schedule"], state["num_stages"], state["num_microbatches"],
                  state["stage"])
        if mine != theirs:
            raise ValueError(
                f"checkpoint is for (schedule, stages, microbatches, stage) = {theirs}, this "
                f"rank runs {mine}; load the file written by the same stage of the same layout"
            )
        newest = int(state["newest"])
        versions = state["versions"]
        for n, p in self._params:
            if n not in versions[newest]:
                raise ValueError(f"checkpoint lacks parameter {n!r}")
            p.data = versions[newest][n].to(device=p.device, dtype=p.dtype).clone()
        self._versions = {}
        for v, ws in versions.items():
            v = int(v)
            if v == newest:
                self._versions[v] = self._alias_master()
            else:
                self._versions[v] = {n: t.to(self.device).clone() for n, t in ws.items()}
        self._newest = newest
        self.next_step = int(state["next_step"])
        self._next_item = (self.next_step, 0)
        self._max_forwarded = self.next_step - 1
        self.optimizer.load_state_dict(state["optimizer"])


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()


def _compare_across_ranks(mine: dict, group) -> None:
    """All-gather ``mine`` and raise ``ValueError`` on every rank if any rank differs."""
    world = dist.get_world_size(group)
    everyone = [None] * world
    dist.all_gather_object(everyone, (_digest(mine), mine), group=group)
    ref_digest, ref = everyone[0]
    bad = [r for r, (d, _) in enumerate(everyone) if d != ref_digest]
    if bad:
        other = everyone[bad[0]][1]
        keys = sorted(k for k in set(ref) | set(other) if ref.get(k) != other.get(k))
        diffs = "; ".join(f"{k}: rank 0 has {ref.get(k)!r}, rank {bad[0]} has {other.get(k)!r}"
                          for k in keys)
        raise ValueError(
            f"pipeline configuration differs across ranks (ranks {bad} differ from rank 0): "
            f"{diffs}. Start every rank with the same configuration"
        )
