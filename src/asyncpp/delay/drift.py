r"""Update norm and drift of a whole model's update sequence, and how it relates to theorem T2.

The *n-th update* :math:`u^{(n)}` of a run concatenates the n-th update applied to every
parameter group of every stage. Stages may apply their n-th update at different wall-clock
steps (original PipeDream: :math:`\tau_s = P-1-s`), so updates are aligned by their ordinal,
not by time — which is also why the single-process simulation and the multi-process executor,
which apply the same update sequence, measure the same statistic. Per update

.. math::
    U_n = \|u^{(n)}\|_F,\qquad D_n = \|u^{(n)} - u^{(n-1)}\|_F\ \ (u^{(-1)} = 0),\qquad
    \rho_n = D_n / U_n,

and the run's *relative Frobenius drift* is :math:`\bar\rho = \frac{1}{N-1}\sum_{n=1}^{N-1}
\rho_n` (``n = 0`` has no predecessor and is left out); its second-half version averages over
:math:`n \ge N/2`.

**ρ̄ is not T2's drift.** Theorem T2 (``theory/error_feedback.py``) bounds the EF run through
:math:`\mathrm{drift} = \frac1K\sum_k \|u_{k-1} - u_{k-2}\|/\eta` in the *spectral* norm (per
matrix: Muon's norm is :math:`\max_i \|X_i\|_2/\eta_i` over the matrices i). For one update,
with :math:`\delta_n = \max_i \|\Delta_{n,i}\|_2/\eta_i`, :math:`\Delta_n = u^{(n)} - u^{(n-1)}`,
and R = Σ_i rank of the matrices (Muon's updates have spectral norm ≤ η_i(1+ε₁)):

.. math::
    \delta_n \le \frac{D_n}{\min_i\eta_i} = \rho_n\frac{U_n}{\min_i\eta_i}
    \le (1+\epsilon_1)\sqrt{R}\,\max_i\frac{\eta_i}{\min_j\eta_j}\;\rho_n ,
    \qquad
    \rho_n \le \frac{\sqrt{R}\,\max_i\eta_i}{U_n}\,\delta_n .

So ρ̄ can *understate* the spectral drift by up to a factor √R (e.g. a rank-one change of a
Muon update), and "EF beats no correction iff ρ̄ < 1" is **not** a consequence of T2: T2's
comparisons are stated for the spectral drift (at the iterates, the common point of the two
runs: EF's bound is below T1's iff C·drift < r(C − 1), i.e. drift < r/2 for the exact LMO;
step X6 of T2). :class:`SpectralDrift` measures δ̄ = mean δ_n itself, per matrix, from the
delay core's ``last_applied`` updates; ``verify/test_error_feedback.py`` checks both
inequalities above on production Muon runs.

The per-group norms come from :class:`~asyncpp.delay.DelayedOptimizer` built with
``track_updates=True``; a :class:`DriftMeter` drains them (:meth:`DelayedOptimizer.pop_stats`)
and combines them: :math:`U_n^2 = \sum_{s,g} \|u^{(n)}_{s,g}\|^2`, likewise :math:`D_n^2`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from .delayed_optimizer import DelayedOptimizer


class DriftMeter:
    """Aligns the track_updates records of several DelayedOptimizers by update ordinal and
    keeps the running mean of :math:`\\rho_n` (overall and over the second half of the run)."""

    def __init__(self, slots: int, total_updates: int) -> None:
        if slots < 1:
            raise ValueError(f"a DriftMeter needs at least one (optimizer, group) slot, got "
                             f"{slots}")
        # fifos[k]: squared (update, drift) norms of slot k's applied updates not yet combined.
        self.fifos: list[deque] = [deque() for _ in range(slots)]
        self.total_updates = total_updates
        self.updates = 0  # combined updates so far (the next one has ordinal self.updates)
        self.sum_rho = 0.0
        self.n_rho = 0
        self.sum_rho_late = 0.0
        self.n_rho_late = 0

    @classmethod
    def for_optimizers(cls, dopts: Sequence[DelayedOptimizer],
                       total_updates: int) -> DriftMeter:
        for d in dopts:
            if not d.track_updates:
                raise ValueError("DriftMeter needs DelayedOptimizers built with "
                                 "track_updates=True")
        return cls(sum(len(d.param_groups) for d in dopts), total_updates)

    def collect(self, dopts: Sequence[DelayedOptimizer]) -> list[tuple[float, float]]:
        """Drain the optimizers' records; return (U², D²) of every update that every slot has
        now applied, oldest first (one slot = one parameter group of one optimizer)."""
        n_groups = sum(len(d.param_groups) for d in dopts)
        if n_groups != len(self.fifos):
            raise ValueError(f"the meter has {len(self.fifos)} slots but the optimizers have "
                             f"{n_groups} parameter groups")
        k = 0
        for d in dopts:
            for rec in d.pop_stats():
                self.fifos[k + rec["group"]].append(
                    (rec["update_norm"] ** 2, rec["drift_norm"] ** 2))
            k += len(d.param_groups)
        done = []
        while all(self.fifos):
            su = sd = 0.0
            for q in self.fifos:
                u2, d2 = q.popleft()
                su += u2
                sd += d2
            done.append((su, sd))
        return done

    def add(self, sq_update: float, sq_drift: float) -> float | None:
        """Count the next combined update; returns :math:`\\rho_n`, or None for the first update
        or a zero update."""
        n = self.updates
        self.updates += 1
        if n == 0 or sq_update <= 0.0:
            return None
        rho = math.sqrt(sq_drift / sq_update)
        self.sum_rho += rho
        self.n_rho += 1
        if 2 * n >= self.total_updates:
            self.sum_rho_late += rho
            self.n_rho_late += 1
        return rho

    def step_record(self, pairs: list[tuple[float, float]]) -> dict:
        """Metrics fields of one training step from the (U², D²) of its combined updates:
        mean ``update_norm``, ``drift_norm`` and ``drift_ratio`` (absent when none)."""
        if not pairs:
            return {}
        rhos = [r for r in (self.add(u2, d2) for u2, d2 in pairs) if r is not None]
        out = {"update_norm": sum(math.sqrt(u2) for u2, _ in pairs) / len(pairs),
               "drift_norm": sum(math.sqrt(d2) for _, d2 in pairs) / len(pairs)}
        if rhos:
            out["drift_ratio"] = sum(rhos) / len(rhos)
        return out

    def summary(self) -> dict:
        """``drift_ratio_mean`` (ρ̄), ``drift_ratio_mean_second_half`` and the update count."""
        return {
            "drift_ratio_mean": self.sum_rho / self.n_rho if self.n_rho else None,
            "drift_ratio_mean_second_half": (self.sum_rho_late / self.n_rho_late
                                             if self.n_rho_late else None),
            "drift_updates": self.updates,
        }

    def state_dict(self) -> dict:
        return {"fifos": [list(q) for q in self.fifos], "updates": self.updates,
                "sum_rho": self.sum_rho, "n_rho": self.n_rho,
                "sum_rho_late": self.sum_rho_late, "n_rho_late": self.n_rho_late}

    def load_state_dict(self, state: dict) -> None:
        if len(state["fifos"]) != len(self.fifos):
            raise ValueError(f"drift state has {len(state['fifos'])} slots, this meter "
                             f"{len(self.fifos)}")
        self.fifos = [deque(tuple(p) for p in q) for q in state["fifos"]]
        for key in ("updates", "sum_rho", "n_rho", "sum_rho_late", "n_rho_late"):
            setattr(self, key, state[key])


class SpectralDrift:
    r"""T2's drift in its own norm: :math:`\delta_n = \max_i \|u^{(n)}_i/\eta^{(n)}_i -
    u^{(n-1)}_i/\eta^{(n-1)}_i\|_2` over the matrices i of the observed
    :class:`DelayedOptimizer` (parameters with fewer than two dimensions are skipped; 3-D stacks
    count per leading index), and its running mean :math:`\bar\delta` over n ≥ 1 (n = 0 has
    no predecessor and is left out, as in :class:`DriftMeter`). With a constant η this is
    :math:`\|u^{(n)}_i - u^{(n-1)}_i\|_2/\eta_i` (computed so, bit for bit); under an lr
    schedule each update is divided by the lr it was applied with, so a warm-up's growing step
    is not counted as drift: for Muon :math:`u/\eta` is the orthogonalised momentum (the LMO
    output T2's drift is about).

    Call :meth:`observe` after every ``step()`` of a ``track_updates=True`` optimizer that
    applied exactly one update per group (it reads ``last_applied``); it keeps one copy of the
    previous update (opt-in: the trainer's :class:`DriftMeter` does not). ``lrs`` gives ηᵢ per
    parameter group (Muon's shape-adjusted lr if it differs per matrix: pass a callable
    ``(group_index, param) -> η``)."""

    def __init__(self, lrs) -> None:
        self.lrs = lrs
        self.prev: list | None = None
        self.values: list[float] = []

    def _lr(self, g: int, p) -> float:
        if callable(self.lrs):
            return float(self.lrs(g, p))
        if isinstance(self.lrs, (int, float)):
            return float(self.lrs)
        return float(self.lrs[g])

    def observe(self, dopt: DelayedOptimizer) -> float | None:
        """Read the update just applied; returns δₙ (None for the first update)."""
        import torch

        if not dopt.track_updates:
            raise ValueError("SpectralDrift needs a DelayedOptimizer built with "
                             "track_updates=True")
        cur = []
        for g, group in enumerate(dopt.param_groups):
            ups = dopt.last_applied[g] or [None] * len(group["params"])
            for p, u in zip(group["params"], ups):
                if u is None or u.ndim < 2 or id(p) in dopt.stats_exclude:
                    continue
                cur.append((g, p, u.detach().clone(), self._lr(g, p)))
        first = self.prev is None
        out = None
        if not first:
            prev = {id(p): (u, lr) for _, p, u, lr in self.prev}
            worst = 0.0
            for _, p, u, lr in cur:
                u0, lr0 = prev.get(id(p), (torch.zeros_like(u), lr))
                # One division when the lr did not change: the constant-lr value, exactly.
                d, scale = ((u - u0), lr) if lr0 == lr else (u / lr - u0 / lr0, 1.0)
                mats = d.reshape(-1, d.shape[-2], d.shape[-1]).double()
                worst = max(worst, float(torch.linalg.matrix_norm(mats, ord=2).max()) / scale)
            out = worst
            self.values.append(worst)
        self.prev = cur
        return out

    def mean(self) -> float | None:
        """δ̄ over the observed updates n ≥ 1."""
        return sum(self.values) / len(self.values) if self.values else None

    def state_dict(self, dopt: DelayedOptimizer) -> dict:
        """The previous update (by group and position, so it survives a reload) and the
        values so far: a resumed run reports the same δₙ as an uninterrupted one."""
        where = {id(p): (g, i) for g, group in enumerate(dopt.param_groups)
                 for i, p in enumerate(group["params"])}
        prev = None if self.prev is None else [
            (*where[id(p)], u, lr) for _, p, u, lr in self.prev]
        return {"prev": prev, "values": list(self.values)}

    def load_state_dict(self, state: dict, dopt: DelayedOptimizer) -> None:
        self.values = list(state["values"])
        self.prev = None if state["prev"] is None else [
            (g, dopt.param_groups[g]["params"][i], u, lr) for g, i, u, lr in state["prev"]]


def applied_lr(group: dict, p) -> float:
    """The step size η an optimizer group applied to ``p``: Muon's shape-adjusted lr for its
    matrices (``asyncpp.optim.muon.adjusted_lr``), the group's lr otherwise."""
    if group.get("use_muon"):
        from ..optim.muon import adjusted_lr

        return adjusted_lr(group["lr"], group.get("adjust_lr_fn"), p.shape)
    return float(group["lr"])
