r"""Deliberately broken variants of the production code, to show that ``verify/`` can fail.

Each mutant is a :class:`verify.systems.System` that hands out a broken version of exactly one
production object; everything else is production code. The mutation tests
(``verify/test_mutants.py``) run the property functions of :mod:`verify.properties` against each
mutant and assert that at least one property rejects it.

* :class:`DelayTwoAsOne` — a delay core that is asked for τ = 1 and silently delays by 2
  (a pipeline that keeps one weight version too many), while reporting τ = 1.
* :class:`EFSignError` — Error Feedback with the sign of the memory term flipped:
  :math:`x_{t+1} = x_t - 2u^{(t)} - u^{(t-1)}` instead of :math:`x_t - 2u^{(t)} + u^{(t-1)}`.
* :class:`NSWrongCoefficients` — Newton–Schulz with its coefficients in the wrong order,
  :math:`(c, b, a) = (2.0315, -4.7750, 3.4445)` instead of :math:`(a, b, c)`, in both the
  standalone function and the Muon optimizer.
* :func:`patch_wrong_weight_version` — a pipeline stage whose forwards read its newest weights
  instead of the weight version the schedule names (so its gradients are not the stale ones
  the delay model says), applied inside the pipeline worker processes of property 6.
* :class:`EFWrongPrevious` — EF with the wrong previous update:
  :math:`x_{t+1} = x_t - 2u^{(t)} + u^{(t-2)}` instead of :math:`+u^{(t-1)}`.
* :class:`TaylorSignError` — DC-ASGD with the correction's sign flipped,
  :math:`\hat g = g - \lambda g\odot g\odot(x_\text{now} - x_\text{stale})`.
* :class:`NesterovOff` — Muon asked for Nesterov momentum runs heavy ball.
* :func:`patch_stage_version_off_by_one` — one pipeline stage (stage 0) forwards on the weight
  version one update older than its schedule names, whenever that version is still held (the
  other stages are right), applied inside the pipeline worker processes of property 6.
"""

from __future__ import annotations

import torch

from asyncpp.delay import DelayedOptimizer
from asyncpp.optim import Muon, newton_schulz
from asyncpp.optim.newton_schulz import DEFAULT_COEFFICIENTS

from .systems import System

WRONG_COEFFICIENTS = tuple(reversed(DEFAULT_COEFFICIENTS))


class _DelayedPlusOne(DelayedOptimizer):
    """Asked for delay 1, delays by 2; its schedule still *reports* delay 1."""

    def __init__(self, optimizer, delay=1, correction="none", **kw):
        bump = (lambda d: 2 if d == 1 else d)
        real = [bump(d) for d in delay] if isinstance(delay, (list, tuple)) else bump(delay)
        super().__init__(optimizer, real, correction, **kw)
        self.reported_delay = delay

    def delay_at(self, step: int, group: int = 0) -> int:
        d = super().delay_at(step, group)
        return 1 if d == 2 else d


class _EFSignFlip(DelayedOptimizer):
    """EF with the memory term's sign flipped: x ← x − 2u − u_prev."""

    def _run_round(self, active):
        prev = {g: self.prev_update[g] for g, delayed in active.items()
                if delayed and self.correction == "ef"}
        super()._run_round(active)
        groups = self.optimizer.param_groups
        with torch.no_grad():
            for g, pu in prev.items():
                if pu is None:
                    continue
                for p, u in zip(groups[g]["params"], pu):
                    if u is not None:
                        p.sub_(u, alpha=2.0)  # undo +u_prev, apply -u_prev


class DelayTwoAsOne(System):
    name = "delay2_as_delay1"

    def delayed(self, opt, delay, correction="none", track_updates=False):
        return _DelayedPlusOne(opt, delay, correction, track_updates=track_updates)


class EFSignError(System):
    name = "ef_sign_error"

    def delayed(self, opt, delay, correction="none", track_updates=False):
        return _EFSignFlip(opt, delay=delay, correction=correction, track_updates=track_updates)


class NSWrongCoefficients(System):
    name = "ns_wrong_coefficients"

    def muon(self, params, *, lr, beta, ns_dtype="float64", nesterov=False):
        return Muon(params, lr=lr, momentum=beta, nesterov=nesterov, weight_decay=0.0,
                    adjust_lr_fn="none", ns_dtype=ns_dtype, ns_coefficients=WRONG_COEFFICIENTS)

    def newton_schulz(self, G, dtype):
        return newton_schulz(G, coefficients=WRONG_COEFFICIENTS, dtype=dtype)


def patch_wrong_weight_version() -> None:
    """Monkeypatch ``PipelineExecutor._forward`` (in this process) to compute every forward on
    the stage's newest weight version instead of the version its schedule action names."""
    import dataclasses

    from asyncpp.pipeline import executor

    original = executor.PipelineExecutor._forward

    def _forward(self, a, *args, **kwargs):
        return original(self, dataclasses.replace(a, version=self._newest), *args, **kwargs)

    executor.PipelineExecutor._forward = _forward


class _EFWrongPrev(DelayedOptimizer):
    """EF whose memory term is u^{(t-2)}: x ← x − 2u + u_prevprev."""

    def _run_round(self, active):
        prev = {g: self.prev_update[g] for g, delayed in active.items()
                if delayed and self.correction == "ef"}
        older = getattr(self, "_older", {})
        super()._run_round(active)
        groups = self.optimizer.param_groups
        with torch.no_grad():
            for g, pu in prev.items():
                pp = older.get(g)
                for i, p in enumerate(groups[g]["params"]):
                    if pu is not None and pu[i] is not None:
                        p.sub_(pu[i])       # undo + u^{(t-1)}
                    if pp is not None and pp[i] is not None:
                        p.add_(pp[i])       # apply + u^{(t-2)}
        self._older = {**older, **{g: pu for g, pu in prev.items()}}


class EFWrongPrevious(System):
    name = "ef_wrong_previous"

    def delayed(self, opt, delay, correction="none", track_updates=False):
        return _EFWrongPrev(opt, delay=delay, correction=correction,
                            track_updates=track_updates)


class _TaylorFlip(DelayedOptimizer):
    """DC-ASGD with the sign of the compensation flipped (λ read as −λ)."""

    @property
    def taylor_lambda(self):
        return -self._lam

    @taylor_lambda.setter
    def taylor_lambda(self, value):
        self._lam = value


class TaylorSignError(System):
    name = "taylor_sign_error"

    def delayed(self, opt, delay, correction="none", track_updates=False):
        return _TaylorFlip(opt, delay=delay, correction=correction,
                           track_updates=track_updates)


class NesterovOff(System):
    name = "nesterov_off"

    def muon(self, params, *, lr, beta, ns_dtype="float64", nesterov=False):
        return Muon(params, lr=lr, momentum=beta, nesterov=False, weight_decay=0.0,
                    adjust_lr_fn="none", ns_dtype=ns_dtype)


def patch_stage_version_off_by_one(stage: int = 0) -> None:
    """Monkeypatch ``PipelineExecutor._forward`` (in this process) so that stage ``stage``
    forwards on the weight version one update older than the one its schedule action names
    when the executor still holds it; every other stage is unchanged."""
    import dataclasses

    from asyncpp.pipeline import executor

    original = executor.PipelineExecutor._forward

    def _forward(self, a, *args, **kwargs):
        if self.topo.stage == stage:
            if (a.version - 1) in self._versions:
                a = dataclasses.replace(a, version=a.version - 1)
        return original(self, a, *args, **kwargs)

    executor.PipelineExecutor._forward = _forward


MUTANTS: dict[str, System] = {
    m.name: m for m in (DelayTwoAsOne(), EFSignError(), NSWrongCoefficients(),
                        EFWrongPrevious(), TaylorSignError(), NesterovOff())
}


class _EFGammaMisapplied(DelayedOptimizer):
    r"""EF(γ) with γ applied to the fresh update only: :math:`x \leftarrow x - (1+\gamma)u +
    u_\text{prev}` instead of :math:`x - (1+\gamma)u + \gamma u_\text{prev}` (identical to
    production at γ = 1, so only a property over γ ≠ 1 can see it)."""

    def _run_round(self, active):
        prev = {g: self.prev_update[g] for g, delayed in active.items()
                if delayed and self.correction == "ef"}
        super()._run_round(active)
        groups = self.optimizer.param_groups
        with torch.no_grad():
            for g, pu in prev.items():
                gam = self.ef_gammas[g]
                if pu is None or gam == 1.0:
                    continue
                for p, u in zip(groups[g]["params"], pu):
                    if u is not None:
                        p.add_(u, alpha=1.0 - gam)  # γ u_prev → u_prev


class EFGammaMisapplied(System):
    """Caught by P5 over γ (``verify/test_stability.py``), not by the γ = 1 probes, so it is
    kept out of :data:`MUTANTS` (whose probes all run the paper's EF)."""

    name = "ef_gamma_misapplied"

    def delayed(self, opt, delay, correction="none", track_updates=False, ef_gamma=1.0):
        return _EFGammaMisapplied(opt, delay=delay, correction=correction,
                                  track_updates=track_updates, ef_gamma=ef_gamma)


EF_GAMMA_MUTANT = EFGammaMisapplied()


class _NesterovDelayBlind(DelayedOptimizer):
    """The Nesterov correction with NAG's undelayed look-ahead κ = β for every delay (the
    look-ahead *not* modified for the staleness) instead of κ_τ(β) = β + … + β^{τ+1}."""

    def __init__(self, optimizer, delay=1, correction="nesterov", **kw):
        super().__init__(optimizer, delay, correction, **kw)
        from asyncpp.delay.ef_gamma import group_beta

        self.ef_gammas = tuple(group_beta(g)[0] if d > 0 else 0.0
                               for g, d in zip(optimizer.param_groups, self.schedule.delays))


class NesterovDelayBlind(System):
    """Caught by the Nesterov stability property (``verify/test_nesterov.py``); its probes
    run ``correction="nesterov"``, so it is kept out of :data:`MUTANTS`."""

    name = "nesterov_delay_blind"

    def delayed(self, opt, delay, correction="none", track_updates=False, ef_gamma=1.0):
        return _NesterovDelayBlind(opt, delay=delay, correction="nesterov",
                                   track_updates=track_updates)


NESTEROV_MUTANT = NesterovDelayBlind()
