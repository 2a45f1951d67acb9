r"""``DelayedOptimizer``: a constant gradient delay, and its corrections, around any optimizer.

Notation: :math:`x_t` are the weights at step t, :math:`g_t = g(x_t;\xi_t)` the gradient computed
there, :math:`U` the wrapped optimizer's step (with its state), :math:`\tau` the delay.

Synchronous (τ = 0) — bit-identical to calling the wrapped optimizer:
    :math:`x_{t+1} = x_t - U(g_t;\ x_t)`.

Delayed, ``formulation="gradient"`` (default; what the pipeline executor realises — a stage
runs its optimizer on the newest weights with the gradient that was computed on an older
version):
    :math:`x_{t+1} = x_t - U(g_{t-\tau};\ x_t)`, and :math:`x_{t+1} = x_t` while t < τ.

Delayed, ``formulation="update"`` ("apply the previous update"): the update is formed when the
gradient is, and applied τ steps later:
    :math:`u_t = U(g_t;\ x_t)`, :math:`x_{t+1} = x_t - u_{t-\tau}`.
The two agree whenever U does not read the weights (SGD-momentum, Muon or AdamW without weight
decay); with decoupled weight decay they differ.

Error Feedback (``correction="ef"``), the EF(γ) family, with :math:`u^{(t)}` the update applied
at step t and :math:`u^{(-1)} = 0`:
    :math:`x_{t+1} = x_t - (1+\gamma)\,u^{(t)} + \gamma\,u^{(t-1)}`,
with γ = ``ef_gamma`` (per parameter group). γ = 1 (the default) is the paper's EF,
:math:`x_{t+1} = x_t - 2u^{(t)} + u^{(t-1)}`, i.e. for τ = 1,
:math:`x_{t+1} = x_t - 2u(t-1) + u(t-2)` (computed with the same operations as before γ existed,
so bit for bit); γ = 0 is no correction (bit for bit); γ = τ is the "τ-scaled" EF;
``ef_gamma="auto"`` takes γ*(β, τ) of T3 per group (``asyncpp.delay.ef_gamma``). One
parameter-sized buffer (:math:`u^{(t-1)}`) persists; one more is used transiently during the
step. Only the EF recursion reads or writes that memory (``track_updates`` keeps its own copy
for the drift statistic, so turning it on never changes a trajectory). Summing the recursion,
:math:`x_{T+1} = x_\tau - \sum u^{(t)} - \gamma u^{(T)}`, i.e. the virtual point
:math:`x_t + \gamma u^{(t-1)}` follows the plain sequence: EF(γ) ends γ updates *ahead* of the
plain delayed sequence (it extrapolates); neither a cooldown nor :meth:`flush` takes that back.

EF without a delay (``ef_without_delay=True``, with ``correction="ef"``): the same recursion on
every step, delayed or not — at τ = 0, :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}`
with :math:`u_t = U(g_t;\ x_t)`: the "optimistic" extrapolation (Popov 1980; Daskalakis et
al. 2018) applied to updates. It is the control that separates what EF corrects of the delay
from what the extrapolation alone does to the optimizer; the EF memory then persists across
synchronous steps instead of being cleared by them.

Nesterov look-ahead (``correction="nesterov"``, after Ajanthan et al., ICML 2025; see
:mod:`asyncpp.delay.nesterov`): the gradient is taken at
:math:`\theta_t = x_t + c(x_t - x_{t-1})` of the plain delayed sequence x, with
:math:`c = c_\tau(\beta) = \sum_{k=1}^{\tau+1}\beta^k`; on the stored weights θ that is the
EF(γ) recursion with γ = c, :math:`\theta_{t+1} = \theta_t - (1+c)u^{(t)} + c\,u^{(t-1)}`,
applied by the same code.

Taylor compensation (``correction="taylor"``, DC-ASGD):
    :math:`\hat g = g + \lambda\, g\odot g\odot(x_\text{now} - x_\text{stale})`,
which needs the weights the gradient was computed on (one copy per pending gradient).

Switches (``sync_start``, ``sync_cooldown``): where the delay drops to 0, every pending gradient
is applied first, oldest first, each as its own optimizer step (with the correction, since each
was delayed), then the fresh gradient without correction — so nothing is dropped and one
``step()`` call may perform several optimizer steps (τ_g + 1 for group g). The fresh gradient
was computed at :math:`x_t`, before the drain moved the weights; e.g. τ = 1 with the cooldown
starting at t: :math:`x' = x_t - U(g_{t-1};\,x_t)`, :math:`x_{t+1} = x' - U(g_t;\,x')`, and
synchronous from t+1 on. Where the delay rises from 0, the pipeline refills: the fresh gradient
is queued and that call applies nothing (:math:`x_{N+1} = x_N` at t = N = ``sync_start``, then
:math:`x_{t+1} = x_t - U(g_{t-\tau};\,x_t)`). EF memory is cleared by every synchronous step
(:math:`u^{(-1)} = 0` again at the start of each delayed phase). At the end of a run,
:meth:`flush` applies whatever is still pending (oldest first, one optimizer step per
gradient, corrected). Invariant, tested: after :meth:`flush`, the wrapped optimizer has made
exactly one step per ``step()`` call and group (``"gradient"``), or every formed update has
been applied exactly once (``"update"``).

Memory (measured by :meth:`extra_bytes`, fp32): τ pending gradients = 4τ bytes/parameter
(delay 1: 4); EF adds one update buffer (+4, delay 1 + EF: 8); Taylor adds one weight
snapshot per pending gradient (+4τ); the ``"update"`` formulation queues τ updates instead of
gradients (same 4τ).

After a delayed ``step()`` the parameters' ``.grad`` is ``None``: the gradient tensor itself
(not a copy) has moved into the queue, which is why the queue costs no more memory than the
gradients it must remember.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.optim import Optimizer

from ..names import CORRECTIONS, FORMULATIONS  # one source, shared with the configuration
from .ef_gamma import resolve_ef_gamma
from .nesterov import resolve_nesterov
from .schedule import DelaySchedule


class DelayedOptimizer:
    r"""Wrap ``optimizer`` so that its steps consume gradients ``delay`` steps old.

    Args:
        optimizer: any ``torch.optim.Optimizer``.
        delay: an integer τ ≥ 0, or one integer per parameter group (original PipeDream:
            group s of P holds stage s and gets :math:`\tau_s = P-1-s`).
        correction: ``"none"``, ``"ef"`` (update-level Error Feedback), ``"taylor"`` or
            ``"nesterov"`` (delay-aware Nesterov look-ahead, :mod:`asyncpp.delay.nesterov`).
        ef_gamma: γ of EF(γ), :math:`x_{t+1} = x_t - (1+\gamma)u^{(t)} + \gamma u^{(t-1)}`: a
            number ≥ 0 (default 1, the paper's EF), one number per parameter group, or
            ``"auto"`` (:math:`\gamma^*(\beta_g, \tau_g)` per group, :math:`\beta_g` read from
            the group's ``momentum``, or
            ``betas[0]`` for the Adam family, Lion, SOAP, ... — a heuristic outside T3's
            model). The resolved values are ``ef_gammas``. Only meaningful with
            ``correction="ef"``: any other value than 1 with another correction is an error.
        nesterov_beta: β of the Nesterov look-ahead
            :math:`\theta = x + c_\tau(\beta)(x - x_{prev})`,
            :math:`c_\tau(\beta) = \sum_{k=1}^{\tau+1}\beta^k` per group: ``"auto"`` (the
            group's momentum / β₁), a number in [0, 1) or one per group. Only meaningful with
            ``correction="nesterov"``.
        taylor_lambda: λ of the Taylor correction.
        sync_start, sync_cooldown, total_steps: synchronous windows (see module docstring).
        formulation: ``"gradient"`` or ``"update"`` (see module docstring).
        ef_without_delay: with ``correction="ef"``, apply EF(γ) on synchronous steps too
            (see the module docstring); default off: EF corrects delayed steps only.
        track_updates: record ‖u‖ and the drift :math:`\|u^{(t)} - u^{(t-1)}\|` of every applied
            step in :attr:`stats` (keeps one update-sized buffer per parameter for the drift;
            never changes the trajectory).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        delay: int | Sequence[int] = 1,
        correction: str = "none",
        *,
        ef_gamma: float | Sequence[float] | str = 1.0,
        nesterov_beta: float | Sequence[float] | str = "auto",
        taylor_lambda: float = 0.1,
        sync_start: int = 0,
        sync_cooldown: int = 0,
        total_steps: int | None = None,
        formulation: str = "gradient",
        track_updates: bool = False,
        ef_without_delay: bool = False,
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"DelayedOptimizer wraps a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        if correction not in CORRECTIONS:
            raise ValueError(f"unknown delay correction {correction!r}; allowed: {CORRECTIONS}")
        if formulation not in FORMULATIONS:
            raise ValueError(f"unknown delay formulation {formulation!r}; allowed: {FORMULATIONS}")
        if correction == "taylor" and formulation != "gradient":
            raise ValueError(
                "the Taylor correction modifies the stale gradient, so it needs "
                "formulation='gradient'"
            )
        if not (isinstance(taylor_lambda, (int, float)) and math.isfinite(taylor_lambda)):
            raise ValueError(f"taylor_lambda must be a finite number, got {taylor_lambda!r}")
        self.optimizer = optimizer
        self.schedule = DelaySchedule.build(
            delay, len(optimizer.param_groups), sync_start, sync_cooldown, total_steps
        )
        self.correction = correction
        if correction != "ef" and not (
                isinstance(ef_gamma, (int, float)) and not isinstance(ef_gamma, bool)
                and ef_gamma == 1):
            raise ValueError(
                f"ef_gamma={ef_gamma!r} applies only to correction='ef' (this wrapper has "
                f"correction={correction!r}); leave ef_gamma at 1 or use correction='ef'"
            )
        if correction != "nesterov" and not (isinstance(nesterov_beta, str)
                                              and nesterov_beta.strip().lower() == "auto"):
            raise ValueError(
                f"nesterov_beta={nesterov_beta!r} applies only to correction='nesterov' (this "
                f"wrapper has correction={correction!r}); leave it at 'auto' or use "
                "correction='nesterov'"
            )
        #: γ of EF(γ) per parameter group (floats; ``"auto"`` resolved at construction). Under
        #: ``correction="nesterov"`` it holds the look-ahead coefficients c_τ(β) of
        #: :mod:`asyncpp.delay.nesterov`: the applied recursion is the same.
        if correction == "nesterov":
            self.ef_gammas: tuple[float, ...] = resolve_nesterov(
                nesterov_beta, optimizer.param_groups, self.schedule.delays)
        else:
            self.ef_gammas = resolve_ef_gamma(
                ef_gamma, optimizer.param_groups, self.schedule.delays)
        # EF and the Nesterov look-ahead both run x ← x − (1+γ)u + γu_prev on delayed steps
        self._extrapolates = correction in ("ef", "nesterov")
        if ef_without_delay and correction != "ef":
            raise ValueError(f"ef_without_delay applies to correction='ef' only (this wrapper has "
                             f"correction={correction!r})")
        if ef_without_delay and isinstance(ef_gamma, str):
            # γ*(β, 0) is 0 (at τ = 0 every γ > 0 narrows the stable range, T3[τ=0, EF(γ)]):
            # "auto" would silently turn the control into the plain method
            raise ValueError(f"ef_gamma={ef_gamma!r} with ef_without_delay: T3's γ* is for delays "
                             "τ ≥ 1 (it is 0 at τ = 0, i.e. no EF); give γ as a number")
        #: EF(γ) on every step, delayed or not (the τ = 0 control; module docstring).
        self.ef_without_delay = bool(ef_without_delay)
        self.taylor_lambda = float(taylor_lambda)
        self.formulation = formulation
        self.track_updates = track_updates
        self.step_count = 0
        n = len(optimizer.param_groups)
        # queues[g]: pending entries of group g, oldest first. An entry is a list over the
        # group's params of (tensor or None); for "gradient" the tensor is a gradient (plus a
        # weight snapshot under Taylor), for "update" it is a finished update u_t.
        self.queues: list[deque] = [deque() for _ in range(n)]
        # prev_update[g]: the EF memory u^{(t-1)} per param of group g, or None (u^{(-1)} = 0).
        # Only the EF recursion writes it, so track_updates never changes the trajectory.
        self.prev_update: list[list[Tensor | None] | None] = [None] * n
        # last_applied[g]: the previous applied update, kept only for the drift statistic.
        self.last_applied: list[list[Tensor | None] | None] = [None] * n
        self.stats: list[dict[str, float]] = []
        # ids of parameters left out of the statistics (a pipeline's second copy of a tied
        # weight: counting it on both stages would count its update twice).
        self.stats_exclude: set[int] = set()

    # -- forwarding -----------------------------------------------------------------------
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def delay_at(self, step: int, group: int = 0) -> int:
        return self.schedule.delay_at(step, group)

    def pending(self) -> int:
        """Number of gradients (or updates) waiting, over all groups."""
        return sum(len(q) for q in self.queues)

    # -- the step ---------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        """Consume this step's gradients (in ``.grad``) and apply whatever is due now."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        t = self.step_count
        groups = self.optimizer.param_groups
        delays = [self.schedule.delay_at(t, g) for g in range(len(groups))]
        if all(d == 0 for d in delays) and self.pending() == 0:
            # Plain synchronous step: exactly the wrapped optimizer (or, as the τ = 0 control,
            # the wrapped optimizer's step extrapolated by EF(γ)).
            if self.ef_without_delay:
                self._run_round({g: True for g in range(len(groups))})
                self.step_count += 1
                return loss
            self._clear_memory(range(len(groups)))
            if self.track_updates:
                self._run_round({g: False for g in range(len(groups))})
            else:
                self.optimizer.step()
            self.step_count += 1
            return loss
        if self.formulation == "update":
            self._step_update_formulation(delays)
        else:
            self._step_gradient_formulation(delays)
        self.step_count += 1
        return loss

    def _step_gradient_formulation(self, delays: list[int]) -> None:
        groups = self.optimizer.param_groups
        due: dict[int, list[tuple[list, bool]]] = {}
        for g, group in enumerate(groups):
            entry = []
            for p in group["params"]:
                grad = p.grad
                snap = p.detach().clone() if (self.correction == "taylor" and grad is not None) \
                    else None
                entry.append((grad, snap))
                p.grad = None
            q = self.queues[g]
            q.append(entry)
            out = []
            while len(q) > delays[g]:
                e = q.popleft()
                # An entry applied in the call that queued it was not delayed (EF still runs on
                # it as the τ = 0 control).
                out.append((e, e is not entry or self.ef_without_delay))
            due[g] = out
        rounds = max(len(v) for v in due.values())
        for r in range(rounds):
            self._apply_entries({g: items[r] for g, items in due.items() if r < len(items)})

    def _apply_entries(self, entries: dict[int, tuple[list, bool]]) -> None:
        """One round: group g's queued ``(gradient, snapshot)`` entry goes into ``.grad``
        (Taylor-compensated if it was delayed) and the corrected step runs for those groups."""
        groups = self.optimizer.param_groups
        for g, (entry, delayed) in entries.items():
            for p, (grad, snap) in zip(groups[g]["params"], entry):
                if grad is not None and delayed and self.correction == "taylor":
                    grad = taylor_compensate(grad, p, snap, self.taylor_lambda)
                p.grad = grad
        self._run_round({g: delayed for g, (_, delayed) in entries.items()})
        for g in entries:
            for p in groups[g]["params"]:
                p.grad = None

    def _step_update_formulation(self, delays: list[int]) -> None:
        groups = self.optimizer.param_groups
        # Form u_t = U(g_t; x_t) now, leave the weights untouched, queue u_t.
        snapshots = {g: [p.detach().clone() for p in groups[g]["params"]]
                     for g in range(len(groups))}
        with self._only_groups(list(range(len(groups)))):
            self.optimizer.step()
        for g, group in enumerate(groups):
            entry = []
            for p, before in zip(group["params"], snapshots[g]):
                if p.grad is None:
                    entry.append(None)
                else:
                    entry.append(before - p.detach())
                p.copy_(before)
                p.grad = None
            self.queues[g].append(entry)
            q = self.queues[g]
            while len(q) > delays[g]:
                e = q.popleft()
                self._apply_updates(g, e, delayed=e is not entry or self.ef_without_delay)

    # -- corrections ------------------------------------------------------------------------
    def _run_round(self, active: dict[int, bool]) -> None:
        """One wrapped-optimizer step over the groups in ``active`` (group → was delayed)."""
        groups = self.optimizer.param_groups
        need_u = {g for g, delayed in active.items()
                  if (delayed and self._extrapolates) or self.track_updates}
        before = {g: [p.detach().clone() if p.grad is not None else None
                      for p in groups[g]["params"]] for g in need_u}
        with self._only_groups(sorted(active)):
            self.optimizer.step()
        for g in need_u:
            params = groups[g]["params"]
            idx = [i for i, b in enumerate(before[g]) if b is not None]
            xs = [params[i].detach() for i in idx]
            # The snapshot buffers become the updates in place (u = x_before − x_after), and the
            # correction is applied with fused multi-tensor ops: no further allocation.
            updates = before[g]
            if idx:
                torch._foreach_sub_([updates[i] for i in idx], xs)
            delayed = active[g]
            gam = self.ef_gammas[g]
            if delayed and self._extrapolates and gam != 0.0:
                # x_{t+1} = x_t - (1+γ)u + γ u_prev = (x_t - u) - γu + γu_prev; γ = 1 keeps the
                # original alpha-free ops (bit for bit), γ = 0 skips them (exactly "none").
                prev = self.prev_update[g]
                if idx:
                    if gam == 1.0:
                        torch._foreach_sub_(xs, [updates[i] for i in idx])
                    else:
                        torch._foreach_sub_(xs, [updates[i] for i in idx], alpha=gam)
                if prev is not None:
                    back = [i for i in idx if prev[i] is not None]
                    if back:
                        if gam == 1.0:
                            torch._foreach_add_([params[i].detach() for i in back],
                                                [prev[i] for i in back])
                        else:
                            torch._foreach_add_([params[i].detach() for i in back],
                                                [prev[i] for i in back], alpha=gam)
            self._record(g, updates)
            if delayed and self._extrapolates:
                self.prev_update[g] = updates
        for g, delayed in active.items():
            if not (delayed and self._extrapolates):
                self.prev_update[g] = None

    def _apply_updates(self, g: int, entry: list, delayed: bool) -> None:
        """``update`` formulation: x ← x − u (plain) or x ← x − (1+γ)u + γu_prev (EF(γ))."""
        params = self.optimizer.param_groups[g]["params"]
        prev = self.prev_update[g]
        gam = self.ef_gammas[g]
        ef = delayed and self._extrapolates
        for i, (p, u) in enumerate(zip(params, entry)):
            if u is None:
                continue
            scale = 1.0 + gam if ef else 1.0
            p.sub_(u, alpha=scale)
            if ef and gam != 0.0 and prev is not None and prev[i] is not None:
                if gam == 1.0:
                    p.add_(prev[i])
                else:
                    p.add_(prev[i], alpha=gam)
        self._record(g, entry)
        self.prev_update[g] = entry if (delayed and self._extrapolates) else None

    def _record(self, g: int, updates: list) -> None:
        if not self.track_updates:
            return
        prev = self.last_applied[g]
        self.last_applied[g] = updates
        params = self.optimizer.param_groups[g]["params"]
        idx = [i for i, (p, u) in enumerate(zip(params, updates))
               if u is not None and id(p) not in self.stats_exclude]
        us = [updates[i] for i in idx]
        # Drift ‖u^{(t)} − u^{(t−1)}‖ with the EF convention u^{(−1)} = 0 (the first applied
        # update's drift is its own norm; so is a parameter's without a previous update).
        ds = [u if prev is None or prev[i] is None else u - prev[i] for i, u in zip(idx, us)]
        # Fused norms and one host transfer per group: no device sync per parameter.
        sq_u, sq_d = (float(torch.stack(torch._foreach_norm(xs)).double().pow(2).sum())
                      if xs else 0.0 for xs in (us, ds))
        self.stats.append({"step": self.step_count, "group": g,
                           "update_norm": math.sqrt(sq_u), "drift_norm": math.sqrt(sq_d)})

    def exclude_from_stats(self, params) -> None:
        """Leave ``params`` out of the ``track_updates`` norms (the trajectory is unaffected)."""
        self.stats_exclude.update(id(p) for p in params)

    def pop_stats(self) -> list[dict[str, float]]:
        """The ``track_updates`` records since the last call (oldest first), and forget them:
        a long run that drains them every step keeps no growing list."""
        out, self.stats = self.stats, []
        return out

    def _clear_memory(self, groups) -> None:
        for g in groups:
            self.prev_update[g] = None

    @contextlib.contextmanager
    def _only_groups(self, indices: list[int]):
        """Let the wrapped optimizer see only some groups, so the others' state (step counts,
        bias corrections) does not advance on a call that has nothing for them."""
        original = self.optimizer.param_groups
        if len(indices) == len(original):
            yield
            return
        self.optimizer.param_groups = [original[i] for i in indices]
        try:
            yield
        finally:
            self.optimizer.param_groups = original

    # -- end of run, external use ---------------------------------------------------------------
    @torch.no_grad()
    def flush(self) -> int:
        """Apply every pending gradient/update now, oldest first; returns how many rounds ran."""
        rounds = 0
        while self.pending():
            if self.formulation == "update":
                for g, q in enumerate(self.queues):
                    if q:
                        self._apply_updates(g, q.popleft(), delayed=True)
            else:
                self._apply_entries({g: (q.popleft(), True)
                                     for g, q in enumerate(self.queues) if q})
            rounds += 1
        return rounds

    @torch.no_grad()
    def apply_stale(self, delay: int | Sequence[int], stale_params: Sequence | None = None,
                    at: int | None = None) -> None:
        """Apply the gradients now in ``.grad``, which were computed ``delay`` steps ago.

        ``at`` is the update's index t (default: this wrapper's own count). A pipeline may apply
        updates out of the order its wrapper would count them (several stages per rank, an
        update deferred into idle time), so it names t; the wrapper then counts on from t + 1.

        This is how the pipeline executor uses the delay core: the staleness comes from its
        weight versions, not from a queue, and this call applies exactly the corrected step that
        :meth:`step` applies to a dequeued gradient. ``stale_params`` (per group, per param) are
        the weights the gradient was computed on, needed by the Taylor correction.
        """
        if self.formulation != "gradient":
            raise ValueError(
                "apply_stale realises the 'gradient' formulation (the optimizer runs now on a "
                f"stale gradient); this wrapper uses formulation={self.formulation!r}"
            )
        groups = self.optimizer.param_groups
        delays = [delay] * len(groups) if isinstance(delay, int) else list(delay)
        if len(delays) != len(groups) or any(
                isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in delays):
            raise ValueError(
                f"apply_stale needs one non-negative integer delay, or one per parameter group "
                f"({len(groups)}), got {delay!r}"
            )
        if at is not None:
            if isinstance(at, bool) or not isinstance(at, int) or at < 0:
                raise ValueError(f"apply_stale needs a non-negative update index at=, got {at!r}")
            self.step_count = at
        active = {}
        for g, group in enumerate(groups):
            delayed = delays[g] > 0
            if delayed and self.correction == "taylor":
                if stale_params is None:
                    raise ValueError("the Taylor correction needs stale_params")
                for p, snap in zip(group["params"], stale_params[g]):
                    if p.grad is not None:
                        p.grad = taylor_compensate(p.grad, p, snap, self.taylor_lambda)
            active[g] = delayed
        self._run_round(active)
        self.step_count += 1

    # -- checkpointing ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Wrapped optimizer state + pending queue + EF memory + step counter."""
        if self.formulation == "update":
            queues = [[list(e) for e in q] for q in self.queues]
        else:
            queues = [[[list(pair) for pair in e] for e in q] for q in self.queues]
        return {
            "optimizer": self.optimizer.state_dict(),
            "step_count": self.step_count,
            "queues": queues,
            "prev_update": [None if pu is None else list(pu) for pu in self.prev_update],
            "last_applied": [None if u is None else list(u) for u in self.last_applied],
            "config": {"delays": list(self.schedule.delays), "correction": self.correction,
                       "formulation": self.formulation, "ef_gamma": list(self.ef_gammas),
                       **({"ef_without_delay": True} if self.ef_without_delay else {})},
        }

    def load_state_dict(self, state: dict) -> None:
        cfg = dict(state["config"])
        # checkpoints from before EF(γ) carry no ef_gamma: they were made with γ = 1
        cfg.setdefault("ef_gamma", [1.0] * len(self.schedule.delays))
        cfg["ef_gamma"] = [float(v) for v in cfg["ef_gamma"]]
        cfg["ef_without_delay"] = bool(cfg.get("ef_without_delay", False))
        mine = {"delays": list(self.schedule.delays), "correction": self.correction,
                "formulation": self.formulation, "ef_gamma": list(self.ef_gammas),
                "ef_without_delay": self.ef_without_delay}
        if cfg != mine:
            raise ValueError(f"checkpoint was made with delay settings {cfg}, this run has {mine}")
        for g, (group, q) in enumerate(zip(self.optimizer.param_groups, state["queues"])):
            for e in q:
                if len(e) != len(group["params"]):
                    raise ValueError(
                        f"checkpoint queue entry of parameter group {g} holds {len(e)} tensors, "
                        f"the group has {len(group['params'])} parameters; load it into the "
                        "same model and optimizer layout it was saved from"
                    )
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_count = int(state["step_count"])
        if self.formulation == "update":
            self.queues = [deque(list(e) for e in q) for q in state["queues"]]
        else:
            self.queues = [deque([tuple(pair) for pair in e] for e in q)
                           for q in state["queues"]]
        self.prev_update = [None if pu is None else list(pu) for pu in state["prev_update"]]
        self.last_applied = [None if u is None else list(u)
                             for u in state.get("last_applied", [None] * len(self.queues))]

    def extra_bytes(self) -> int:
        """Bytes held by the delay core itself (queues + EF memory), excluding the optimizer."""
        seen = set()
        total = 0

        def add(t):
            nonlocal total
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                total += t.numel() * t.element_size()

        for q in self.queues:
            for entry in q:
                for x in entry:
                    if isinstance(x, tuple):
                        for t in x:
                            add(t)
                    else:
                        add(x)
        for pu in (*self.prev_update, *self.last_applied):
            for t in pu or ():
                add(t)
        return total


def taylor_compensate(grad: Tensor, x_now: Tensor, x_stale: Tensor, lam: float) -> Tensor:
    r"""DC-ASGD: :math:`\hat g = g + \lambda\, g\odot g\odot(x_\text{now} - x_\text{stale})`."""
    return grad + lam * grad * grad * (x_now.detach() - x_stale)
