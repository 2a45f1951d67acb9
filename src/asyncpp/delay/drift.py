r"""Update norm and drift of a whole model's update sequence — the quantity of theorem T2.

The *n-th update* :math:`u^{(n)}` of a run concatenates the n-th update applied to every
parameter group of every stage. Stages may apply their n-th update at different wall-clock
steps (original PipeDream: :math:`\tau_s = P-1-s`), so updates are aligned by their ordinal,
not by time — which is also why the single-process simulation and the multi-process executor,
which apply the same update sequence, measure the same statistic. Per update

.. math::
    U_n = \|u^{(n)}\|,\qquad D_n = \|u^{(n)} - u^{(n-1)}\|\ \ (u^{(-1)} = 0),\qquad
    \rho_n = D_n / U_n,

and the run's drift is :math:`\bar\rho = \frac{1}{N-1}\sum_{n=1}^{N-1} \rho_n` (``n = 0`` has
no predecessor and is left out); its second-half version averages over :math:`n \ge N/2`.
:math:`\bar\rho` is drift/r of theorem T2 (``theory/error_feedback.py``): Error Feedback beats
no correction at T2's virtual point iff the drift is below r, i.e. :math:`\bar\rho < 1`.

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
