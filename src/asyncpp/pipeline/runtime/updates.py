r"""The update queue: each stage's accumulated gradient is reduced, clipped and applied through
the delay core, off the critical path where the schedule allows.

Every stage applies each accumulated gradient g (computed on version v) with
``DelayedOptimizer.apply_stale(delay, stale_params=x_v)`` — the same code the single-process
simulation runs, so Error Feedback :math:`x_{t+1} = x_t - 2u(t-1) + u(t-2)` and the Taylor
correction :math:`\hat g = g + \lambda g\odot g\odot(x_t - x_v)` are literally shared. Before
it, the gradient is averaged over the stage's data-parallel group, summed with its tied copy
(first ↔ last stage) and clipped by the global norm over all stages if ``max_grad_norm`` is set
(``clip_scope="stage"``: by the stage's own), :math:`g \leftarrow g\cdot\min(1, c/\|g\|)`.
The tied-weight sum and the norm's scalar all-reduce are *asynchronous*: :meth:`UpdateQueue.
launch` starts them when the stage's last backward of the step is done, and the update is
applied once they have completed — at the latest right before the first forward that reads the
version it produces (2BW: the forwards of step t + 2) (:meth:`UpdateQueue.apply_pending`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from ...optim import clip_coefficient, scale_, squared_norm
from .context import PendingUpdate, StageContext


class UpdateQueue:
    """Reductions, clipping and ``apply_stale`` for the stage contexts of one rank."""

    def __init__(self, topo, transport, device, *, max_grad_norm, clip_scope: str,
                 reduce_dp_gradients: bool, on_gradients, before_update,
                 needed_from: Callable[[StageContext], int], track_grad_norm: bool = True
                 ) -> None:
        self.topo = topo
        self.transport = transport
        self.device = device
        self.max_grad_norm = max_grad_norm
        self.clip_scope = clip_scope
        self.reduce_dp_gradients = reduce_dp_gradients
        self.on_gradients = on_gradients
        self.before_update = before_update
        self.needed_from = needed_from
        self.track_grad_norm = track_grad_norm

    @torch.no_grad()
    def launch(self, ctx: StageContext, a, leaves: dict, stale: dict) -> None:
        """Collect the gradient of update ``a`` from its leaves, reduce it over data-parallel
        replicas, start the tied-weight and global-norm all-reduces, and queue the update."""
        grads = {n: (leaves[n].grad if p.requires_grad else None) for n, p in ctx.params}
        t = self.topo
        names = [n for n, _ in ctx.params]
        if t.dp_group is not None and self.reduce_dp_gradients:
            self._all_reduce_mean(ctx, grads, names, t.dp_group, t.dp_size, "data-parallel")
        pend = PendingUpdate(a, grads, stale)
        tied = sorted(ctx.tied, key=lambda n: ctx.tied[n]) \
            if (ctx.tied and t.tie_group is not None) else []
        if tied:
            pend.tie_works, pend.tie_done = self._all_reduce_async(ctx, grads, tied,
                                                                  t.tie_group, "tied-weight")
        # This stage's share of the squared norm: the tied sum counts once, on the first
        # stage, which needs the tied all-reduce first (the last stage launched it when it
        # finished the same step, earlier).
        skip = set(ctx.tied) if (ctx.is_last and ctx.num_stages > 1) else set()
        if tied and ctx.is_first:
            for w in pend.tie_works:
                self.transport.wait(w, "the tied-weight all-reduce",
                                    self.transport.others(t.tie_group))
            pend.tie_done()
            pend.tie_works, pend.tie_done = [], None
        # the norm only when clipping or the caller reads it (logging, drift tracking)
        if self.track_grad_norm or self.max_grad_norm is not None:
            sq = squared_norm([grads[n] for n in names if n not in skip and grads[n] is not None],
                              device=self.device)
            ctx.grad_sq.setdefault(a.step, []).append(sq)
        if self.max_grad_norm is not None:
            if self.clip_scope == "global" and t.pp_group is not None and ctx.num_stages > 1:
                total = sq.clone()
                pend.norm_work = dist.all_reduce(total, group=t.pp_group, async_op=True)
                pend.norm_sq = total
            else:
                pend.norm_sq = sq
        ctx.pending.append(pend)

    def apply_pending(self, ctx: StageContext, need_version, apply: Callable) -> None:
        """Apply ``ctx``'s queued updates in order (through ``apply(ctx, pending)``): all whose
        reductions are done, and — waiting for them — every one up to the update producing
        ``need_version`` (``math.inf``: all; ``None``: only those ready)."""
        while ctx.pending:
            pend = ctx.pending[0]
            must = need_version is not None and pend.action.update < need_version
            if not (must or pend.ready()):
                break
            ctx.pending.pop(0)
            apply(ctx, pend)

    @torch.no_grad()
    def apply(self, ctx: StageContext, pend: PendingUpdate) -> None:
        """Finish the reductions of ``pend``, clip, and apply it with the delay core; keep the
        version it replaces alive if a forward, backward or Taylor update still reads it (the
        master then moves to the buffer of a retired version: 2BW holds two copies of the
        weights, never three, and allocates none in steady state)."""
        a, grads = pend.action, pend.grads
        tr = self.transport
        for w in pend.tie_works:
            tr.wait(w, "the tied-weight all-reduce", tr.others(self.topo.tie_group))
        if pend.tie_done is not None:
            pend.tie_done()
        if pend.norm_sq is not None:
            tr.wait(pend.norm_work, "the gradient-norm all-reduce", tr.others(self.topo.pp_group))
            ctx.last_norm_sq = pend.norm_sq
            scale_([g for g in grads.values() if g is not None],
                   clip_coefficient(pend.norm_sq, self.max_grad_norm))
        if self.on_gradients is not None:
            self.on_gradients(a.update, {n: g for n, g in grads.items() if g is not None})
        need = self.needed_from(ctx)
        # first: a retired buffer becomes the master's new home (not the weights this
        # update's Taylor correction reads)
        self._retire_unread(ctx, min(need, a.version) if ctx.optimizer.correction == "taylor"
                            else need)
        if ctx.newest >= need:  # the version it replaces is still read
            ctx.move_master()
        for n, p in ctx.params:
            p.grad = grads[n]
        dopt = ctx.optimizer
        stale_params = None
        if dopt.correction == "taylor":
            stale_params = [[pend.stale[ctx.name_of[id(p)]] for p in g["params"]]
                            for g in dopt.param_groups]
        if self.before_update is not None:
            self.before_update(a.applied_at)
        dopt.apply_stale(a.delay, stale_params=stale_params, at=a.applied_at)
        for _, p in ctx.params:
            p.grad = None
        replaced, ctx.newest = ctx.newest, a.new_version
        need = self.needed_from(ctx)
        ctx.versions[a.new_version] = ctx.next_version(replaced, need)
        ctx.updates_issued += 1
        self._retire_unread(ctx, need)

    @staticmethod
    def _retire_unread(ctx: StageContext, need: int) -> None:
        """Retire the versions older than ``need`` (nothing reads them again) but the newest."""
        for v in [v for v in ctx.versions if v < need and v != ctx.newest]:
            ctx.retire(v)

    def _all_reduce_mean(self, ctx, grads, names, group, divisor, what) -> None:
        works, finish = self._all_reduce_async(ctx, grads, names, group, what, divisor)
        for w in works:
            self.transport.wait(w, f"the {what} all-reduce", self.transport.others(group))
        finish()

    def _all_reduce_async(self, ctx, grads, names, group, what, divisor: int = 1):
        """Start the sum (÷ ``divisor``) of ``grads[names]`` over ``group``, one flat buffer
        per dtype plus a has-gradient mask; returns (works, finish) — call ``finish()`` after
        the works complete to write the results back into ``grads``."""
        present = torch.tensor([grads[n] is not None for n in names], dtype=torch.float64,
                               device=self.device)
        params = dict(ctx.params)
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
