r"""Property 9: production Muon under delay reproduces the theory's exact limit cycle.

:func:`theory.muon_cycle.cycle` computes, in exact rational arithmetic, the trajectory of the
1-D model (sign descent with heavy-ball or Nesterov momentum, delay τ, with or without EF) on
f(x) = h x²/2, and certifies that it has locked onto a periodic orbit. A 1×1 production
``Muon(lr, momentum=β, nesterov)`` step is s₀·lr·sign(v) with s₀ = NS(1)
(``verify/problems.t1_tightness_problem``) as long as ∣v∣ ≥ ε = 10⁻⁷ (Newton–Schulz divides by
max(∣v∣, ε)); below it the step is shorter. So the exact map is run from production's own
start (x₀ = fl(0.3η), divided by η, both as exact rationals: :func:`start_point`) and through
production's floor (:func:`production_floor`), and with lr = η/s₀ inside
``DelayedOptimizer(delay=τ, correction)`` production must follow that trajectory and land on
the certified attractor it predicts (one of the set of :mod:`theory.muon_attractors`):

Why both are needed: at β = 0.9, τ = 1, η = 0.03 the momentum passes through
v = −1.8·10⁻⁶·hη on its way to the cycle, i.e. ∣v∣ = 5.5·10⁻⁸ < ε for h = 1; production then
steps 0.979η, which moves the lattice offset and sends it to another attractor of the set. With
a start taken from the float values, the exact map and production agree to rounding.

* ``P9.cycle.orbit`` — max_t |x_t(production) − x_t(theory)|/η ≤ 1e-9 over the whole
  certified trajectory (transient, then two periods after locking);
* ``P9.cycle.amplitude`` — the measured amplitude max|x| over the last certified period
  equals the theory's (same tolerance); for no EF and τ ≥ 1 the record also carries the
  harmonic-balance value π/(2ω*) (an approximation: reported, not asserted).

It is a P7-style equality on a theory-side object (the certified cycle), in the momentum regime
and with EF, so a wrong EF rule, a wrong delay, Nesterov switched off or a wrong
Newton–Schulz changes the orbit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np
import torch

from asyncpp.optim.newton_schulz import DEFAULT_EPS as NS_EPS
from theory import muon_cycle

from .problems import DTYPE
from .report import Record
from .systems import PRODUCTION, System

TOL = 1e-9


@dataclass(frozen=True)
class CycleInstance:
    beta: str = "1/2"        # an exact fraction, as a string
    tau: int = 1
    ef: bool = False
    nesterov: bool = False
    eta: float = 0.1
    h: float = 1.0

    def params(self) -> dict:
        return asdict(self)


def _s0(system: System = PRODUCTION) -> float:
    """s₀ = NS(1): the production 1×1 Newton–Schulz output for a unit input."""
    return float(system.newton_schulz(torch.ones(1, 1, dtype=DTYPE), torch.float64))


def start_point(inst: CycleInstance) -> tuple[float, Fraction]:
    """The production start x₀ = 0.3η as the float64 it really is, and the exact model's start
    in units of η: that float divided by the float η, both taken exactly as rationals (for a
    non-dyadic η such as 0.03 this is not 3/10, and the model starts where production does)."""
    x0 = float(torch.tensor(0.3 * inst.eta, dtype=DTYPE))
    return x0, Fraction(x0) / Fraction(inst.eta)


def production_floor(inst: CycleInstance, system: System = PRODUCTION) -> muon_cycle.Floor:
    r"""The production Newton–Schulz normalisation floor in the model's units: NS divides v by
    max(∣v∣, ε), so for ∣v∣ < ε (v = hη·v_model) the 1×1 step is lr·NS(v) with NS(v) < s₀.
    The threshold ε/(hη) and the short step lr·NS(hη·v)/η are exact rationals (the latter the
    float64 production value taken exactly): the model follows production through it."""
    s0 = _s0(system)
    lr = inst.eta / s0
    eta, h = Fraction(inst.eta), Fraction(inst.h)

    def step(v: Fraction) -> Fraction:
        g = torch.full((1, 1), float(v * h * eta), dtype=DTYPE)
        return Fraction(float(lr * system.newton_schulz(g, torch.float64))) / eta

    return muon_cycle.Floor(Fraction(NS_EPS) / (h * eta), step)


def production_orbit(inst: CycleInstance, steps: int, system: System = PRODUCTION):
    """x_t/η (t ≤ steps) of production 1×1 Muon on f = h x²/2 with lr = η/s₀, from
    :func:`start_point`."""
    s0 = _s0()
    x = torch.nn.Parameter(torch.full((1, 1), start_point(inst)[0], dtype=DTYPE))
    beta = float(Fraction(inst.beta))
    opt = system.muon([x], lr=inst.eta / s0, beta=beta, ns_dtype="float64",
                      nesterov=inst.nesterov)
    dopt = system.delayed(opt, inst.tau, "ef" if inst.ef else "none")
    xs = []
    for _ in range(steps + 1):
        xs.append(float(x.detach()) / inst.eta)
        x.grad = inst.h * x.detach().clone()
        dopt.step()
    return np.array(xs)


def predicted_cycle(inst: CycleInstance) -> muon_cycle.Cycle:
    """The certified attractor the exact map predicts for ``inst``: from production's own
    start (:func:`start_point`), through production's normalisation floor
    (:func:`production_floor`). The production Newton–Schulz builds the floor, never the
    system under test, so a mutated NS cannot make its own prediction."""
    return muon_cycle.cycle(Fraction(inst.beta), inst.tau, inst.ef, inst.nesterov,
                            start_point(inst)[1], floor=production_floor(inst))


def cycle_orbit(inst: CycleInstance, system: System = PRODUCTION) -> list[Record]:
    """``P9.cycle.orbit`` and ``P9.cycle.amplitude`` (module docstring)."""
    c = predicted_cycle(inst)
    theory = np.array([float(v) for v in c.trajectory])
    steps = len(theory) - 1
    try:
        prod = production_orbit(inst, steps, system)
    except Exception as exc:  # a mutant that cannot run fails the property
        return [Record("P9.cycle.orbit", "upper", math.inf, TOL, False, params=inst.params(),
                       extra={"raised": repr(exc)})]
    dev = float(np.max(np.abs(prod - theory))) if np.all(np.isfinite(prod)) else math.inf
    last = prod[-c.period:]
    amp_prod = float(np.max(np.abs(last)))
    amp_th = float(c.amplitude)
    extra = {"period": c.period, "locked_at": c.locked_at, "margin": c.margin,
             "amplitude_theory": amp_th, "half_p2p_theory": float(c.half_p2p),
             "mean_abs_theory": float(c.mean_abs), "offset": float(c.offset),
             "floor_steps": list(c.floor_steps)}
    if not inst.ef and inst.tau >= 1:
        b = float(Fraction(inst.beta))
        extra["amplitude_harmonic_balance"] = muon_cycle.harmonic_balance_amplitude(
            b, inst.tau, inst.nesterov)
        if not inst.nesterov:
            # measured mean |grad f| over whole periods against T1's bound as K -> inf
            # (exact LMO, sigma = 0): L eta (1/2 + 2((1-a)/a + tau)); how much of the lag and
            # delay terms the cycle attains (reported, not asserted: it falls like sqrt(1-beta))
            extra["t1_limit_ratio"] = float(c.mean_abs) / (0.5 + 2 * (b / (1 - b) + inst.tau))
    amp_dev = abs(amp_prod - amp_th)
    return [Record("P9.cycle.orbit", "upper", dev, TOL, dev <= TOL, params=inst.params(),
                   extra=extra),
            Record("P9.cycle.amplitude", "upper", amp_dev, TOL, amp_dev <= TOL,
                   params=inst.params(), extra={**extra, "amplitude_production": amp_prod})]


__all__ = ["CycleInstance", "cycle_orbit", "predicted_cycle", "production_floor",
           "production_orbit", "start_point"]


@dataclass(frozen=True)
class DiagonalInstance:
    beta: str = "1/2"
    tau: int = 1
    ef: bool = False
    hs: tuple = (1.0, 3.0, 10.0)
    lr: float = 0.01
    steps: int = 2000

    def params(self) -> dict:
        return {**asdict(self), "hs": list(self.hs)}


def diagonal_cycle(inst: DiagonalInstance, system: System = PRODUCTION) -> list[Record]:
    r"""``P9.diagonal``: what carries over to matrices. Production Muon (float64 NS) on the
    diagonal quadratic f(X) = Σ_i h_i X_ii²/2 + Σ_{i≠j} X_ij²/2 from a diagonal X₀: the
    iterates stay diagonal (exactly: NS of a diagonal matrix is diagonal), and every diagonal
    coordinate ends on a cycle whose amplitude does not depend on h_i. With the exact polar
    factor each coordinate would be the 1-D cycle of :mod:`theory.muon_cycle` (step η = lr);
    the production NS gives coordinate i the step lr·φ(|v_i|/‖v‖_F), inside the BAND
    [0, 1+ε₁]·lr, so the check is the band-level statement
    0.5·A₁ ≤ amplitude_i/lr ≤ (1+ε₁)(A₁ + 1), A₁ the certified 1-D amplitude (units of η) —
    a loose consistency check, not an equality (stated as such)."""
    from . import band as bandmod

    n = len(inst.hs)
    h = torch.tensor(inst.hs, dtype=DTYPE)
    x0 = torch.tensor([0.3, -0.7, 1.1, 0.5, -0.2][:n], dtype=DTYPE) * 10 * inst.lr
    X = torch.nn.Parameter(torch.diag(x0))
    opt = system.muon([X], lr=inst.lr, beta=float(Fraction(inst.beta)), ns_dtype="float64")
    dopt = system.delayed(opt, inst.tau, "ef" if inst.ef else "none")
    tail = []
    for t in range(inst.steps):
        D = torch.diagonal(X.detach())
        G = X.detach().clone()
        G.diagonal().copy_(h * D)
        X.grad = G
        dopt.step()
        if t >= inst.steps // 2:
            tail.append(torch.diagonal(X.detach()).abs())
    off = float((X.detach() - torch.diag(torch.diagonal(X.detach()))).abs().max())
    amp = (torch.stack(tail).max(0).values / inst.lr).tolist()
    A1 = float(muon_cycle.cycle(Fraction(inst.beta), inst.tau, inst.ef, False).amplitude)
    eps1, _ = bandmod.band(n, torch.float64)
    lo, hi = 0.5 * A1, (1 + eps1) * (A1 + 1)
    ok = off == 0.0 and all(lo <= a <= hi for a in amp)
    return [Record("P9.diagonal", "upper", max(amp), hi, ok, params=inst.params(),
                   extra={"amplitudes_over_lr": amp, "amplitude_1d": A1, "lower": lo,
                          "offdiagonal": off, "eps1": eps1})]


__all__ += ["DiagonalInstance", "diagonal_cycle"]
