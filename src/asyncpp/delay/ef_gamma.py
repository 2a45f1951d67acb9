r"""EF(γ): the Error Feedback family, and the theory-tuned choice γ*(β, τ).

The family (u(t) the update applied at step t, u(−1) = 0):

.. math::
    x_{t+1} = x_t - (1+\gamma)\,u(t) + \gamma\,u(t-1).

γ = 1 is the paper's EF, γ = 0 no correction, γ = τ the "τ-scaled" EF. Summing it,
:math:`v_t = x_t + \gamma u(t-1)` follows the plain sequence :math:`v_{t+1} = v_t - u(t)`.

On :math:`f = h x^2/2` with EMA momentum β (``SGD(momentum=β, dampening=β)``) and delay τ ≥ 1,
the recursion has the characteristic polynomial (``theory.stability``, T3)

.. math::
    P(z) = z^\tau (z-1)(z-\beta) + p\,\big((1+\gamma) z - \gamma\big),\qquad p = \eta h(1-\beta),

and it is stable for every ηh below
:math:`c^*(\beta,\tau,\gamma) = p^*(\beta,\tau,\gamma)/(1-\beta)`.
:func:`optimal_ef_gamma` returns the γ that maximises :math:`p^*` (hence :math:`c^*`; the
maximiser does not depend on the learning-rate scaling, so it is the same for heavy-ball
``dampening=0``), in closed form for every τ (``theory.ef_gamma_closed``): on
:math:`z = e^{i\omega}` the characteristic equation is affine in (p, pγ), a unit-circle root
at :math:`e^{\pm i\omega}` needs

.. math::
    p = \pi_\tau(\omega) = 2\tan(\omega/2)\big(\sin(\tau+1)\omega - \beta\sin\tau\omega\big),

:math:`p^*` is the maximum of :math:`\pi_\tau` on its first lobe :math:`(0, \omega_1)`, at
the root :math:`\omega^*` of :math:`\pi_\tau'`, and

.. math::
    \gamma^* = \frac{\beta\cos\tau\omega^* - \cos(\tau+1)\omega^*}{p^*} - \frac12,
    \qquad c^* = \frac{p^*}{1-\beta}.

τ = 1 gives :math:`\gamma^* = 2\beta/(2-\beta)^2`, :math:`c^* = (2-\beta)^2/(4(1-\beta))`.
:func:`critical_p` (the root locus of one γ) is the numeric check ``verify/`` runs against it.

This module is the product's own, dependency-light implementation (numpy only); ``verify/``
checks that it agrees with ``theory.ef_gamma_closed`` and with the numeric search of
``theory.stability``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

log = logging.getLogger(__name__)

AUTO = "auto"


def critical_p(beta: float, tau: int, gamma: float) -> float:
    r"""p* = c*(1−β): the smallest p > 0 at which
    :math:`z^\tau(z-1)(z-\beta) + p((1+\gamma)z-\gamma)` has a root on the
    unit circle (root locus: p = −Q(z)/R(z) real at a unit-circle root of
    :math:`z^n(Q(z)R(1/z) - Q(1/z)R(z))`); ``inf`` if there is none. τ ≥ 1."""
    Q = np.polymul(np.polymul([1.0, -1.0], [1.0, -float(beta)]), np.r_[1.0, np.zeros(tau)])
    n = len(Q) - 1
    R = np.r_[np.zeros(n - 1), 1.0 + gamma, -gamma]
    H = np.polysub(np.polymul(Q, R[::-1]), np.polymul(Q[::-1], R))
    # leading coefficients that vanish to working precision carry roots near infinity only
    scale = float(np.max(np.abs(H)))
    while len(H) > 1 and abs(H[0]) <= 1e-13 * scale:
        H = H[1:]
    best = math.inf
    for zz in np.roots(H):
        if abs(abs(zz) - 1.0) > 1e-6:
            continue
        zz = zz / abs(zz)
        den = np.polyval(R, zz)
        if abs(den) < 1e-14:
            continue
        v = -np.polyval(Q, zz) / den
        if abs(v.imag) <= 1e-7 * max(1.0, abs(v)) and v.real > 1e-12:
            best = min(best, float(v.real))
    return best


def _lobe_maximum(beta: float, tau: int) -> tuple[float, float]:
    r"""(ω*, p*): the maximum of :math:`\pi_\tau(\omega) = 2\tan(\omega/2)s(\omega)`,
    :math:`s = \sin(\tau+1)\omega - \beta\sin\tau\omega`, on its first lobe (τ ≥ 1).

    :math:`\cos^2(\omega/2)\,\pi_\tau'(\omega) = g(\omega) = s(\omega) + \sin\omega\,
    s'(\omega)`: g > 0 near 0 and g(π/(τ+1)) < 0 (there s ≤ 0 and s' < 0), and the only zero of
    g on (0, π/(τ+1)) is ω* (one critical point per lobe, and the next lobe's would make
    g(π/(τ+1)) > 0), so bisection on g finds it to the last bit."""
    def g(w: float) -> float:
        s = math.sin((tau + 1) * w) - beta * math.sin(tau * w)
        ds = (tau + 1) * math.cos((tau + 1) * w) - beta * tau * math.cos(tau * w)
        return s + math.sin(w) * ds

    lo, hi = 0.0, math.pi / (tau + 1)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if g(mid) > 0.0:
            lo = mid
        else:
            hi = mid
    w = 0.5 * (lo + hi)
    return w, 2.0 * math.tan(0.5 * w) * (math.sin((tau + 1) * w) - beta * math.sin(tau * w))


@lru_cache(maxsize=256)
def optimal_ef_gamma(beta: float, tau: int) -> float:
    r"""γ*(β, τ) = argmax over γ of the critical step c*(β, τ, γ) of EF(γ), in closed form:
    :math:`\gamma^* = (\beta\cos\tau\omega^* - \cos(\tau+1)\omega^*)/p^* - 1/2` at the
    first-lobe maximum (ω*, p*) of :math:`\pi_\tau` (see the module docstring). τ = 1:
    :math:`2\beta/(2-\beta)^2`. τ = 0: 0.0 (a synchronous group is never corrected)."""
    if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 0:
        raise ValueError(f"tau must be an integer delay >= 0, got {tau!r}")
    b = float(beta)
    if not 0.0 <= b < 1.0:
        raise ValueError(f"beta (momentum) must lie in [0, 1), got {beta!r}")
    if tau == 0:
        return 0.0
    if tau == 1:
        return 2.0 * b / (2.0 - b) ** 2
    w, pstar = _lobe_maximum(b, int(tau))
    return float((b * math.cos(tau * w) - math.cos((tau + 1) * w)) / pstar - 0.5)


def optimal_ef_critical_step(beta: float, tau: int) -> float:
    r"""c*(β, τ, γ*) = p*/(1−β), the critical ηh of EF(γ*) (τ ≥ 1)."""
    if isinstance(tau, bool) or not isinstance(tau, (int, np.integer)) or tau < 1:
        raise ValueError(f"tau must be an integer delay >= 1, got {tau!r}")
    b = float(beta)
    if not 0.0 <= b < 1.0:
        raise ValueError(f"beta (momentum) must lie in [0, 1), got {beta!r}")
    return _lobe_maximum(b, int(tau))[1] / (1.0 - b)


def group_beta(group: dict) -> tuple[float, bool]:
    r"""(β, in_model): the momentum β of a parameter group, and whether the optimizer is
    inside T3's model (EMA/heavy-ball momentum with a linear step: SGD ``momentum``).

    Muon groups (``use_muon=True``) give their ``momentum`` but are outside T3's model: Muon's
    step has a fixed length (an LMO), so on a quadratic it does not diverge past an edge but
    settles on limit cycles, and the γ that minimises its delayed floor is not T3's γ*
    (``theory.muon_attractors``). Groups with ``use_muon=False`` (Muon's AdamW part) and
    optimizers with ``betas`` (Adam family, Lion, SOAP, MARS, Adan) give β₁ = ``betas[0]``:
    outside T3's model too. Outside the model γ*(β, τ) is a heuristic."""
    if group.get("use_muon", False) and "momentum" in group:
        return float(group["momentum"]), False
    if group.get("use_muon", True) and "momentum" in group:
        return float(group["momentum"]), True
    if "betas" in group:
        return float(tuple(group["betas"])[0]), False
    if "momentum" in group:
        return float(group["momentum"]), True
    raise ValueError(
        "ef_gamma='auto' reads the momentum β of each parameter group from its 'momentum' "
        f"or 'betas' entry, but a group has neither (keys: {sorted(k for k in group)}); "
        "pass a number or one number per group instead"
    )


def resolve_ef_gamma(ef_gamma, groups: Sequence[dict], delays: Sequence[int]) -> tuple[float, ...]:
    r"""One γ per parameter group from a number, a per-group sequence of numbers, or
    ``"auto"`` (:math:`\gamma^*(\beta_g, \tau_g)` with :math:`\beta_g` from :func:`group_beta`,
    :math:`\tau_g` the group's delay).

    Raises one ``ValueError`` naming the bad value for anything else (negative, non-finite,
    wrong length, unknown string)."""
    n = len(groups)
    if isinstance(ef_gamma, str):
        if ef_gamma.strip().lower() != AUTO:
            raise ValueError(
                f"ef_gamma must be a number >= 0, one number per parameter group, or 'auto'; "
                f"got {ef_gamma!r}"
            )
        out = []
        for g, (group, tau) in enumerate(zip(groups, delays)):
            beta, exact = group_beta(group)
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"ef_gamma='auto' needs a momentum β in [0, 1); parameter "
                                 f"group {g} has β = {beta!r}")
            gam = optimal_ef_gamma(beta, int(tau))
            if not exact and group.get("use_muon", False):
                log.warning("ef_gamma='auto': group %d is a Muon group, outside T3's model "
                            "(SGD momentum); T3's gamma* = %.6g for beta = %g, tau = %d is a "
                            "heuristic there and on Muon's delayed 1-D cycles it does not "
                            "minimise the floor (theory.muon_attractors); ef_gamma=1 (the "
                            "paper's EF) is the alternative", g, gam, beta, int(tau))
            elif not exact:
                log.info("ef_gamma='auto': group %d uses beta1 = %g of an optimizer outside "
                         "T3's momentum model (a heuristic): gamma = %.6g", g, beta, gam)
            out.append(gam)
        return tuple(out)
    if isinstance(ef_gamma, Sequence):
        vals = tuple(ef_gamma)
        if len(vals) != n:
            raise ValueError(
                f"got {len(vals)} per-group ef_gamma values for {n} parameter groups; pass one "
                "per group, a single number, or 'auto'"
            )
    else:
        vals = (ef_gamma,) * n
    for v in vals:
        if (isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))
                or not math.isfinite(float(v)) or float(v) < 0):
            raise ValueError(
                f"ef_gamma must be a finite number >= 0 (1 = the paper's EF, 0 = none), one "
                f"per parameter group, or 'auto'; got {v!r} (in ef_gamma={ef_gamma!r})"
            )
    return tuple(float(v) for v in vals)


__all__ = ["AUTO", "critical_p", "group_beta", "optimal_ef_critical_step", "optimal_ef_gamma",
           "resolve_ef_gamma"]
