r"""The pipeline executor: the interpreter of a rank's schedule program over
``torch.distributed`` point-to-point messages.

A rank holds one :class:`~.stage.Stage` per stage it runs — one (each rank one
stage), or several (``placement``: WPipe's partitions d and P/2 + d on rank d, a looped
placement's stages s ≡ r mod R). Its program is the schedule's stage program (one stage: the
lazy generator :func:`~asyncpp.pipeline.schedules.stage_actions`) or its stages' programs
merged by the simulator (:func:`~asyncpp.pipeline.simulator.rank_programs`: an order the
simulation proved free of deadlock). Each action is dispatched through :data:`HANDLERS` to
the handler of its kind, on the context of its stage; runs of sends and receives go to the
:class:`~.transport.Transport`, gradients to the :class:`~.updates.UpdateQueue`. One stage
per rank is the placement of one stage on each rank. Set-up lives in :mod:`.stage_setup`
and :mod:`.startup`, the program loops in :mod:`.interpreter`, the step stream in
:mod:`.steps`, the read-only views in :mod:`.views`.

**Weight versions.** When an update must keep the version it replaces alive (2BW, PipeDream),
the master first moves to a copy of its storage and the old storage stays with the version;
otherwise the update runs in place. So 2BW keeps 2 copies of the weights, PipeDream stage s
keeps P − s, GPipe/1F1B 1, and a WPipe rank 2 (G0 partition) + 1 (G1 partition).

**Streaming.** :meth:`PipelineExecutor.run_steps` runs the program over a stream of batches
and yields a :class:`StepOutput` as each step completes; the pipeline drains only at the end
of the call (the caller ends calls where the semantics need a quiet pipeline: evaluation,
checkpoint, stop, end of run) or where 2BW's synchronous start/cooldown makes the delay 0.
:meth:`PipelineExecutor.end_after` moves the end of a running call earlier (a stop; one stage
per rank). Weight versions are freed by liveness at run time: a version lives while the next
forward, an in-flight backward or a queued Taylor update reads it.

**Updates** (:mod:`.updates`): reduced as soon as the stage's last backward of a step is done,
applied when the reductions have completed or, at the latest, right before the first forward
that reads the version it produces. In steady state no stage waits for another at an update;
without deferral, the last stage would wait every step for the first stage to finish that
step's backward (a bubble of P − 1 backward slots). A step where the delay schedule says 0
(synchronous start/cooldown) is applied with delay 0 and the pipeline drains after it, exactly
as ``DelayedOptimizer.step`` does at a switch. The deferral changes no number: the streamed run
equals the per-step-drain run bit for bit (tested).

**Failures.** A peer that is dead or silent for ``timeout`` seconds raises
:class:`PipelineError` on this rank, which exits and so ends its own peers' waits in turn. On
NCCL the data-parallel and tied-weight reductions read a has-gradient mask back to the host
(one synchronisation per update when dp > 1 or weights are tied); nothing else does.

**Where the time goes** (:mod:`asyncpp.pipeline.runtime.stage_clock`): each compute action
is timed as its stage's busy time, the transport's posts and waits as communication or waiting
for a peer; :meth:`PipelineExecutor.stage_times` reports the steady-state window of each
stage.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.optim import Optimizer

from ...delay import DelayedOptimizer
from .. import schedules as S
from ..actions import (
    ACTIVATION,
    GRADIENT,
    Backward,
    BackwardInput,
    BackwardWeight,
    Forward,
    OptimizerStep,
)
from ..registry import get_spec
from ..topology import PipelineTopology
from . import checkpoint
from .errors import PipelineError
from .evaluation import evaluate
from .interpreter import HANDLERS, in_order, interleaved
from .options import ExecutorOptions
from .stage import Stage
from .stage_clock import BUSY, StageClock, StageTimes
from .stage_setup import check_placement, make_stage, place, stage_delay
from .startup import check_config, check_config_early, sync_start_weights
from .steps import RunState, StepOutput, pull
from .transport import Transport
from .updates import UpdateQueue
from .views import StageViews

__all__ = ["HANDLERS", "ExecutorOptions", "PipelineExecutor", "StepOutput", "stage_delay"]

log = logging.getLogger(__name__)


class PipelineExecutor(StageViews):
    """Run pipeline schedule ``schedule`` for this rank's stage (or stages).

    Args:
        stage: this rank's ``nn.Module``; with ``placement``, a mapping {stage index: module}
            of the stages this rank runs. The first stage takes a microbatch of the input
            batch; others take the previous stage's output (one floating tensor). The last
            stage's output goes to ``loss_fn(output, targets)``; without ``loss_fn`` the last
            stage is called as ``stage(x, targets)`` and must return the scalar loss.
        optimizer: the stage's optimizer (e.g. from ``build_optimizer`` over
            ``stage.named_parameters()``), or a ``DelayedOptimizer`` around it carrying the
            correction ("ef", "taylor", "nesterov") and synchronous start/cooldown. Its delay
            must be the schedule's (:func:`stage_delay`); a bare optimizer is wrapped with it.
            With ``placement``: a mapping {stage index: optimizer}.
        schedule: "gpipe", "1f1b", "pipedream", "2bw" or "wpipe".
        num_microbatches: m; every batch is split into m equal microbatches along dim 0.
        topology: a :class:`PipelineTopology` whose ``num_stages`` is the number of ranks of
            one pipeline; created (collectively) when omitted.
        placement: the stages each rank of the pipeline runs, e.g.
            ``default_devices(build("wpipe", 4, m))`` = [[0, 2], [1, 3]] (WPipe on P/2 ranks)
            or ``looped_devices(4, 2)`` (looped 1F1B); default one stage per rank. Several
            stages per rank need gloo, no tied weights, and ``clip_scope="stage"`` if clipping.
        loss_fn: see ``stage``.
        options: the optional settings, an :class:`ExecutorOptions` (clipping, timeout,
            callbacks, ...; its defaults when omitted).
    """

    def __init__(
        self,
        stage: nn.Module | Mapping[int, nn.Module],
        optimizer: Optimizer | DelayedOptimizer | Mapping,
        *,
        schedule: str,
        num_microbatches: int,
        topology: PipelineTopology | None = None,
        placement: Sequence[Sequence[int]] | None = None,
        loss_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
        options: ExecutorOptions | None = None,
    ) -> None:
        o = ExecutorOptions() if options is None else options
        if not isinstance(o, ExecutorOptions):
            raise ValueError(f"options must be an ExecutorOptions, got {type(o).__name__}")
        num_stages, mesh, timeout = o.num_stages, o.mesh, o.timeout
        max_grad_norm, clip_scope, config = o.max_grad_norm, o.clip_scope, o.config
        spec = get_spec(schedule)
        if not spec.needs_pipeline:
            raise ValueError(
                f"unknown pipeline schedule {schedule!r}; allowed: {', '.join(S.SCHEDULES)}"
            )
        name = spec.name
        self.spec = spec
        if not isinstance(num_microbatches, int) or num_microbatches < 1:
            raise ValueError(f"num_microbatches must be a positive integer, got "
                             f"{num_microbatches!r}")
        given = check_placement(placement, stage, optimizer)
        self.merged = given is not None
        """Whether the rank runs a placement's merged program (stages given as mappings,
        messages tagged, a fixed end) rather than its one stage's lazy program."""
        modules = dict(stage) if self.merged else {None: stage}
        for mod in modules.values():
            if not isinstance(mod, nn.Module):
                raise ValueError(f"stage must be an nn.Module, got {type(mod).__name__}")
        self.schedule_name = name
        self.num_microbatches = num_microbatches
        self.timeout = float(timeout)
        self.max_grad_norm = max_grad_norm
        self.clip_scope = clip_scope
        self.before_update = o.before_update
        self.forward_fn = o.forward_fn
        self.eager_updates = o.eager_updates
        self.loss_fn = loss_fn
        self.on_gradients = o.on_gradients
        for mod in modules.values():
            if not list(mod.parameters()):
                raise ValueError("the stage has no parameters; give every stage at least one "
                                 "layer")
        self.device = next(next(iter(modules.values())).parameters()).device

        num_ranks = len(given) if self.merged else num_stages
        if self.merged and num_stages is not None and num_stages != sum(map(len, given)):
            raise ValueError(f"num_stages={num_stages} disagrees with the placement's "
                             f"{sum(map(len, given))} stages")
        if topology is None:
            if num_ranks is None:
                if mesh is not None:
                    dims = list(mesh.mesh_dim_names or ())
                    if "pp" not in dims:
                        raise ValueError(f"the device mesh needs a dimension named 'pp', got "
                                         f"{tuple(dims)}")
                    num_ranks = mesh.size(dims.index("pp"))
                else:
                    num_ranks = dist.get_world_size() if dist.is_initialized() else 1
            total = sum(map(len, given)) if self.merged else num_ranks
            check_config_early(name, total, num_microbatches, config)
            topology = PipelineTopology.create(num_ranks, mesh=mesh, timeout=timeout)
        elif num_ranks is not None and num_ranks != topology.num_stages:
            what = "the placement's ranks" if self.merged else "num_stages"
            raise ValueError(f"{what}={num_ranks} disagrees with the topology's "
                             f"{topology.num_stages}")
        self.topo = topology
        self.placement, mine, stage_rank, modules, optimizer = place(
            given, topology, modules, optimizer, stage, self.device, max_grad_norm, clip_scope)
        P = self.num_stages = sum(map(len, self.placement))

        self.reduce_dp_gradients = o.reduce_dp_gradients
        # Validate locally, then share the verdict: a mistake on one rank stops every rank
        # with the same message instead of leaving the others waiting.
        self.contexts: dict[int, Stage] = {}
        try:
            for s in mine:
                self.contexts[s] = make_stage(self, modules[s], optimizer[s],
                                              o.tied_parameters, name, P, s)
            local_error = None
        except ValueError as e:
            local_error = str(e)
        if not topology.distributed and local_error:
            raise ValueError(local_error)
        check_config(self, config, local_error)
        self.clock = StageClock(mine)
        self.transport = Transport(topology, self.timeout, self.device, stage_rank, set(mine),
                                   tagged=self.merged, clock=self.clock)
        sync_start_weights(self)
        self.updates = UpdateQueue(
            topology, self.transport, self.device, max_grad_norm=max_grad_norm,
            clip_scope=clip_scope, reduce_dp_gradients=o.reduce_dp_gradients,
            on_gradients=o.on_gradients, before_update=o.before_update,
            needed_from=self._needed_from, track_grad_norm=o.track_grad_norm)
        self.next_step = 0
        self._end: int | None = None
        self._pred = None
        self._prog = S.program(name, P, num_microbatches)

    # -- communication -------------------------------------------------------------------------
    def wait(self, work, what: str, peer=None) -> None:
        """Wait for ``work`` (a ``torch.distributed`` work handle) up to the executor's timeout;
        :class:`PipelineError` naming this rank, ``what`` and ``peer`` (a rank, or the list of
        ranks a collective waits for) if it does not finish."""
        self.transport.wait(work, what, peer)

    # -- running ---------------------------------------------------------------------------------
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
        last = self.num_stages - 1 in self.contexts
        if last:
            losses.copy_(torch.stack([o.loss for o in outs]))
        return self._gather_losses(losses, last)

    def end_after(self, step: int) -> None:
        """Make the running :meth:`run_steps` stop after step ``step`` (drain there). Every
        rank must ask for the same step, and no stage may have started a later step: the
        caller decides it from information every rank shares, early enough (the trainer
        decides ``lookahead + 1`` steps ahead, see :meth:`ScheduleSpec.lookahead_steps`)."""
        if self._end is None:
            raise ValueError("end_after() is only meaningful while run_steps() is running")
        if step + 1 > self._end:
            return
        if self.merged:
            raise PipelineError("a running call with several stages per rank runs a fixed "
                                "program and cannot be shortened; give run_steps the steps to "
                                "run")
        ctx = self._only()
        if step < ctx.max_forwarded:
            raise PipelineError(
                f"cannot end the pipeline after step {step}: this stage already started step "
                f"{ctx.max_forwarded} (the stop was decided too late)")
        self._end = step + 1

    def _program(self, t0: int, num_steps: int) -> Iterator:
        """This rank's program for steps t0 .. t0 + num_steps − 1: the lazy stage program with
        a movable end (one stage), or the stages' programs merged by the simulator."""
        if not self.merged:
            return S.stage_actions(self.schedule_name, self.num_stages, self.num_microbatches,
                                   self._only().stage, t0, lambda: self._end,
                                   sync_steps=self._pred)
        from ..simulator import rank_programs

        sched = S.build(self.schedule_name, self.num_stages, self.num_microbatches, num_steps,
                        start_step=t0, sync_steps=self._pred)
        return iter(rank_programs(sched, self.placement)[self.topo.stage])

    def run_steps(self, batches: Iterable, num_steps: int) -> Iterator[StepOutput]:
        r"""Stream up to ``num_steps`` optimizer steps without draining between them: pull
        step t's ``(inputs, targets)`` from ``batches`` when this rank first needs it (every
        rank pulls every step's batch, in order, so iterators that advance a sampler stay in
        step on all ranks), and yield a :class:`StepOutput` as this rank completes each step.
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
        self._prog = S.program(self.schedule_name, self.num_stages, self.num_microbatches,
                               self._pred)
        program = self._program(t0, num_steps)
        k = self.spec.updates_per_step(self.num_microbatches)
        run = RunState(iter(batches), t0 - 1, 1.0 / (self.num_microbatches // k), {}, {})
        for ctx in self.contexts.values():
            ctx.begin_call()
        self.transport.begin_call()
        run_program = interleaved if self.merged else in_order
        self.clock.start()
        try:
            yield from run_program(self, program, run)
            for c in self.contexts.values():
                self._apply_pending(c, need_version=math.inf)
            self.transport.drain_sends()
            self.next_step = self._end
        finally:
            self.clock.stop()
            self._end = None

    def stage_times(self) -> list[StageTimes]:
        """Busy, communication and idle time of each stage of this rank over the steps run so
        far, the first step excluded as warm-up
        (:mod:`asyncpp.pipeline.runtime.stage_clock`)."""
        return self.clock.report()

    def _gather_losses(self, losses: torch.Tensor, last: bool) -> list[float]:
        """Per-step losses on every rank: the last stage's (mean over DP replicas) are summed
        into everyone's buffer by one all-reduce; other stages contribute zeros."""
        if self.topo.distributed:
            if not last:
                losses.zero_()
            else:
                losses /= self.topo.dp_size
            self.wait(dist.all_reduce(losses, group=self.topo.world_group, async_op=True),
                      "the loss all-reduce", self.transport.others(self.topo.world_group))
        return [float(x) for x in losses.tolist()]

    def _key(self, step: int, mb: int):
        return (step, mb) if self.spec.per_microbatch_updates else (step,)

    # -- handlers ------------------------------------------------------------------------------
    def _before_forward(self, a: Forward, ctx: Stage, run: RunState) -> None:
        """The step's batch is read and the version the forward reads exists."""
        pull(run, a.step, self.num_microbatches, self.device, 0 in self.contexts,
             self.num_stages - 1 in self.contexts)
        self._apply_pending(ctx, need_version=a.version)

    def _forward(self, a: Forward, ctx: Stage, run: RunState) -> None:
        xs, ys = run.data[a.step]
        x = xs[a.mb] if ctx.is_first else ctx.in_msgs.pop((ACTIVATION, a.step, a.mb))
        sent = ctx.forward(self._key(a.step, a.mb), a.step, a.mb, a.version, x,
                           ys[a.mb] if ctx.is_last else None, run.scale)
        if sent is not None:
            ctx.out_msgs[(ACTIVATION, a.step, a.mb)] = sent
        ctx.max_forwarded = max(ctx.max_forwarded, a.step)
        ctx.next_item = (a.step, a.mb + 1) if a.mb + 1 < self.num_microbatches \
            else (a.step + 1, 0)
        if a.mb == self.num_microbatches - 1 and all(
                c.next_item[0] > a.step for c in self.contexts.values()):
            run.data.pop(a.step, None)  # every stage of this rank is past the step

    def _grad_in(self, a, ctx: Stage):
        return None if ctx.is_last else ctx.in_msgs.pop((GRADIENT, a.step, a.mb))

    def _grad_out(self, a, ctx: Stage, g) -> None:
        if g is not None:
            ctx.out_msgs[(GRADIENT, a.step, a.mb)] = g

    def _backward(self, a: Backward, ctx: Stage, run: RunState) -> None:
        self._grad_out(a, ctx, ctx.backward(a.step, a.mb, self._grad_in(a, ctx)))

    def _backward_input(self, a: BackwardInput, ctx: Stage, run: RunState) -> None:
        self._grad_out(a, ctx, ctx.backward_input(a.step, a.mb, self._grad_in(a, ctx)))

    def _backward_weight(self, a: BackwardWeight, ctx: Stage, run: RunState) -> None:
        ctx.backward_weight(a.step, a.mb)

    def _launch_update(self, a: OptimizerStep, ctx: Stage, run: RunState
                       ) -> StepOutput | None:
        leaves, stale = ctx.accum.pop(self._key(a.step, a.mb if a.mb is not None else 0))
        self.updates.launch(ctx, a, leaves, stale)
        if self.eager_updates:
            self._apply_pending(ctx, need_version=math.inf)
        if not (a.mb is None or a.mb == self.num_microbatches - 1):
            return None
        done = run.done.setdefault(a.step, set())
        done.add(ctx.stage)
        if len(done) < len(self.contexts):
            return None
        del run.done[a.step]
        loss = None
        sq = []
        for c in self.contexts.values():
            if c.is_last:
                loss = c.losses.pop(a.step, None)
            if a.step in c.grad_sq:
                sq.append(torch.stack(c.grad_sq.pop(a.step)))
        total = None if not sq else sq[0] if len(sq) == 1 else torch.stack(sq).sum(0)
        return StepOutput(a.step, loss, total)

    # -- updates -------------------------------------------------------------------------------
    def _needed_from(self, ctx: Stage) -> int:
        """The oldest version of ``ctx`` still to be read: by the next forward (the successor
        of the last forwarded microbatch, whichever call runs it), an in-flight backward, or a
        queued update's Taylor correction."""
        t, i = ctx.next_item
        v = self._prog.version(ctx.stage, t, i)
        taylor = [p.action.version for p in ctx.pending] \
            if ctx.optimizer.correction == "taylor" else []
        return min([ctx.oldest_inflight(v), v, *taylor])

    def _apply_pending(self, ctx: Stage, need_version) -> None:
        self.updates.apply_pending(ctx, need_version, self._apply)

    def _apply_ready(self) -> None:
        """Idle time (a receive has not arrived): apply the queued updates whose reductions
        are done, on every stage of this rank."""
        for c in self.contexts.values():
            self.updates.apply_pending(c, None, self._apply)

    def _apply(self, ctx: Stage, pend) -> None:
        self.clock.push(BUSY, ctx.stage)  # also when applied while a receive is out
        self.updates.apply(ctx, pend)
        self.clock.pop()

    # -- evaluation and checkpoints ----------------------------------------------------------
    def evaluate(self, batches: Iterable, version: int | None = None) -> list[float]:
        """Forward-only losses of ``batches`` (``runtime.evaluation.evaluate``)."""
        return evaluate(self, batches, version)

    def state_dict(self) -> dict:
        """Everything this rank needs to resume (``runtime.checkpoint.state_dict``)."""
        return checkpoint.state_dict(self)

    def load_state_dict(self, state: Mapping) -> None:
        """Restore :meth:`state_dict` (``runtime.checkpoint.load_state_dict``)."""
        checkpoint.load_state_dict(self, state)
