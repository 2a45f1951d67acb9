r"""MC — Muon's own stability: delayed Muon on a quadratic settles into a limit cycle.

T3 is exact for SGD with momentum, whose iterates diverge past a critical step. Muon does not
diverge: its step has a fixed length η, so on a quadratic the delayed iterates end on a
*limit cycle* whose amplitude is set by the delay and the momentum. This module is the
counterpart of T3 for Muon.

**1-D is sign descent.** For a 1×1 parameter the exact LMO of the spectral ball is
sign(v) (the polar factor of a scalar), and the production Newton–Schulz returns
s₀·sign(v) with the constant s₀ = φ(1) (5 quintic steps; ``verify/`` uses lr = η/s₀), for
∣v∣ ≥ 10⁻⁷ (the normalisation floor). On f(x) = h x²/2 (h > 0) the method is

.. math::
    m_t = \beta m_{t-1} + (1-\beta) h x_{t-\tau},\ m_{\tau-1} = 0,\qquad
    v_t = m_t\ \text{(heavy ball) or } (1-\beta) h x_{t-\tau} + \beta m_t\ \text{(Nesterov)},

    u_t = \eta\,\mathrm{sign}(v_t),\qquad x_{t+1} = x_t - u_t\ \text{(no EF) or }
    x_t - 2u_t + u_{t-1}\ \text{(EF, } u_{\tau-1} = 0),

for t ≥ τ (x_{t+1} = x_t for t < τ, the idle start of ``DelayedOptimizer``). h drops out
(sign is scale invariant): **the cycle does not depend on the curvature**, only on
(η, β, τ, EF, Nesterov) and the start's lattice offset x₀/η mod 1. Every iterate stays on the
lattice x₀ + ηℤ.

**Exact cycle (computed, certified).** :func:`cycle` runs the recursion in exact rational
arithmetic until the sign sequence repeats, then *certifies* the cycle: for the periodic sign
pattern s* of period p (with Σ s* = 0 over a period, so x is periodic), the periodic momentum
is the fixed point

.. math::  m^*_t = \frac{1-\beta}{1-\beta^p}\sum_{j=0}^{p-1}\beta^j h x^*_{t-\tau-j},

and the deviation e_t = m_t − m*_t obeys e_t = β e_{t−1} once x is periodic. If
∣β^{a} e∣ < min_t ∣v*_t∣ (the margin; β∣e∣ for Nesterov), sign(v_t) = s*_t for ever: the
orbit is locked (step MC3). The amplitude max∣x*∣ and the mean ∣x*∣ (which is what the
T1 bound measures, (1/K)Σ L∣y_k∣) are read off the certified cycle.

**Amplitude, no EF: harmonic balance (steps MC1–MC6).** The loop s → x → v → s is a relay
(s = sign v) around a linear system: the integrator x_{t+1} = x_t − ηs_t, the delay z^{−τ}
and the momentum filter H(z) = (1−β)/(1 − βz^{−1}) (heavy ball) or
(1−β)((1+β) − βz^{−1})/(1 − βz^{−1}) (Nesterov). A relay oscillation of half-period N
(frequency ω = π/N) closes when the phase lags add up to a quarter period beyond the
integrator's: the integrator lags π/2 + ω/2 (MC1), the delay τω, the momentum
φ(ω) = atan(β sin ω/(1 − β cos ω)) (heavy ball, MC2; Nesterov subtracts
atan(β sin ω/(1 + β − β cos ω)) ≥ 0, MC5), so

.. math::  \Big(\tau + \tfrac12\Big)\omega + \varphi_\beta(\omega) = \frac{\pi}{2},\qquad
           N = \frac{\pi}{\omega^*},\qquad A \approx \frac{N}{2}\,\eta .

β = 0 is exact: ω* = π/(2τ+1), A = (τ + ½)η — T1's tightness orbit (MC3). For β → 1 (heavy
ball, τ ≥ 1) φ → π/2 − ω/2 − (1−β)/ω, so ω* ≈ √((1−β)/τ) and

.. math::  A \approx \frac{\pi}{2}\sqrt{\frac{\tau}{1-\beta}}\;\eta \qquad\text{(MC4)} :

the cycle grows like (1−β)^{−1/2}, not like the EMA's mean lag β/(1−β) (the momentum's phase
lag saturates below a quarter period). Harmonic balance is an approximation (cited, MC7); the
exact certified amplitude is within about one lattice step η of N/2·η + η/2 for τ ≥ 1 on the
grid of :func:`amplitude_table` (τ = 0 with β > 0 is degenerate for it). φ ≥ 0 on (0, π):
**without EF, momentum never shrinks the 1-D cycle** (the exact table agrees: the amplitude is
non-decreasing in β at every τ, for heavy ball and Nesterov); Nesterov's smaller phase lag
gives the smaller cycle.

**EF.** With w_t = x_t + u_{t−1} (T2's virtual sequence), w_{t+1} = w_t − u_t: an undelayed
sign descent whose gradient point is offset by o = −(u_{t−1} − u_{t−τ−1}) − Σ u_j. While the
sign is constant the τ = 1 offset vanishes, so EF removes the delay *between* switches and
pays at a switch (the offset is 2η there, and the iterate jumps by 3η). What the exact
certified cycles show (x₀ = 0.3η, τ ≤ 3, β ∈ {0, .5, .8, .9, .95}; table in the book):

* EF's cycle grows with β much more slowly than the plain one, so the ratio
  amplitude(no EF)/amplitude(EF) *increases* with β: at τ = 1, β = 0.95 the heavy-ball cycle
  is 8.3η without EF and 5.7η with it; with Nesterov 4.7η and 2.7η.
* With EF + Nesterov at τ = 1 the cycle is 2.7η for every β ≥ 0.8 (bounded in β), and it
  *shrinks* from β = 0 (2.7η) to β = 0.5 (2.3η): the only place on the grid where raising β
  shrinks the iterate's cycle (:func:`momentum_shrinks`). At the virtual point the mean ∣w∣
  also falls from β = 0 to 0.5 (0.85η → 0.65η).

So in 1-D "higher momentum helps" holds only together with EF, and only as *relative*
robustness: momentum makes consecutive updates equal (drift → 0), on which EF is exact; the
cycle itself is never smaller than at β = 0 except in the EF + Nesterov case above. At β = 0
EF is worse at the iterate (τ = 1: mean ∣x∣ 1.5η vs 0.83η), as T2's extra Lηr at the iterate
says.

**Matrices.** For a diagonal (or any fixed-singular-vector) quadratic and the *exact* polar
factor, Muon's step is diag(sign(v_i)): the coordinates decouple into independent 1-D cycles
of the amplitude above, each independent of its curvature h_i. The production Newton–Schulz
is an inexact polar factor: a diagonal input stays diagonal, but coordinate i moves by
lr·φ(∣v_i∣/‖v‖_F) (inside BAND's [0, 1+ε₁]·lr), which depends on the other coordinates, so the
lattice and the exact orbit are lost. What carries over is the band-level statement that
``verify/``'s ``P9.diagonal`` checks on production Muon (h = 1, 3, 10): every coordinate
cycles with amplitude/lr in [A₁/2, (1+ε₁)(A₁ + 1)], A₁ the certified 1-D amplitude, and
(measured) within a few tenths of A₁ whatever h_i. Non-commuting (non-diagonal) quadratics are
not covered.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import sympy as sp

from .assumptions import Result, Step, beta, eq, ge, tau


def _sign(v) -> int:
    return (v > 0) - (v < 0)


@dataclass(frozen=True)
class Floor:
    r"""The production LMO's normalisation floor, in the model's units.

    Newton–Schulz divides v by max(‖v‖_F, ε), so for ∣v∣ < ε a 1×1 step is shorter than
    η: it is lr·φ(v/ε) (φ the Newton–Schulz polynomial), not lr·φ(1)·sign(v). In units of
    hη the floor is ``threshold`` = ε/(hη); ``step(v)`` returns that short step in units of η
    for 0 < ∣v∣ < ``threshold`` (an exact rational, e.g. the float64 value of the production
    polynomial taken exactly). ``verify/`` builds it from the production Newton–Schulz; the
    model without a floor (the exact LMO) is ``floor=None``."""

    threshold: Fraction
    step: Callable[[Fraction], Fraction]


@dataclass(frozen=True)
class Cycle:
    """A certified limit cycle of the 1-D model (all values exact rationals, η = 1 units).

    Amplitude convention (one definition, two numbers): :attr:`amplitude` is max∣x*∣,
    :attr:`half_p2p` is (max x* − min x*)/2; they differ by the cycle's mean offset."""

    beta: Fraction
    tau: int
    ef: bool
    nesterov: bool
    x0: Fraction
    start: int            # production step at which the certified periodic regime begins
    period: int
    xs: tuple             # x*_t over one period (t = start .. start+period-1), units of η
    ws: tuple             # virtual points w*_t = x*_t + u*_{t-1} (EF), else = xs
    signs: tuple          # s*_t over one period
    margin: float         # min |v*_t| / h over the period (> 0)
    locked_at: int        # step from which the certificate guarantees the pattern for ever
    trajectory: tuple     # x_t for t = 0 .. locked_at + 2 period (units of η)
    floor_steps: tuple = ()  # production steps t at which the step was shortened by the floor

    @property
    def amplitude(self) -> Fraction:
        """max ∣x*∣ over the cycle (units of η)."""
        return max(abs(x) for x in self.xs)

    @property
    def half_p2p(self) -> Fraction:
        """Half peak-to-peak (max x* − min x*)/2 over the cycle (units of η)."""
        return (max(self.xs) - min(self.xs)) / 2

    @property
    def mean_abs(self) -> Fraction:
        """The mean of ∣x*∣ over one period, in units of η, i.e. (1/K)Σ∣y_k∣/η over whole
        periods."""
        return sum(abs(x) for x in self.xs) / self.period

    @property
    def mean_sq(self) -> Fraction:
        """The mean of x*² over one period (units of η²): the loss floor is hη²·mean_sq/2."""
        return sum(x * x for x in self.xs) / self.period

    @property
    def virtual_mean_abs(self) -> Fraction:
        return sum(abs(x) for x in self.ws) / self.period

    @property
    def virtual_amplitude(self) -> Fraction:
        return max(abs(x) for x in self.ws)

    @property
    def offset(self) -> Fraction:
        """The lattice offset of the cycle, x* mod 1 (units of η)."""
        return self.xs[0] - math.floor(self.xs[0])

    def key(self) -> tuple:
        """The cycle as a set of states up to time shift: the rotation of (x*, s*) over one
        period that is smallest (two runs that end on the same orbit give the same key)."""
        pairs = list(zip(self.xs, self.signs))
        return min(tuple(pairs[i:] + pairs[:i]) for i in range(self.period))


def _simulate(beta: Fraction, tau: int, ef: bool, nesterov: bool, x0: Fraction, T: int,
              floor: Floor | None = None):
    r"""x_t, s_t, m_t, u_t (t < T) of the exact model (η = h = 1) from rest (zero momentum,
    u_{τ−1} = 0, τ idle steps); s_t = u_t = 0 for idle steps. u_t = s_t = sign(v_t), except
    where 0 < ∣v_t∣ < floor.threshold (then u_t = floor.step(v_t))."""
    xs, ss, ms, us = [], [], [], []
    x, m, u_prev = x0, Fraction(0), Fraction(0)
    for t in range(T):
        xs.append(x)
        if t < tau:
            ss.append(0)
            ms.append(m)
            us.append(Fraction(0))
            continue
        g = xs[t - tau]
        m = beta * m + (1 - beta) * g
        v = (1 - beta) * g + beta * m if nesterov else m
        s = _sign(v)
        if floor is not None and s != 0 and abs(v) < floor.threshold:
            u = floor.step(v)
        else:
            u = Fraction(s)
        ss.append(s)
        ms.append(m)
        us.append(u)
        x = x - (2 * u - u_prev if ef else u)
        u_prev = u
    return xs, ss, ms, us


def trajectory(beta, tau: int, ef: bool = False, nesterov: bool = False, x0=Fraction(3, 10),
               steps: int = 100, floor: Floor | None = None) -> list[Fraction]:
    """x_t/η for t = 0..steps of the exact 1-D model (exact rationals; ``beta``, ``x0`` as
    fractions or strings)."""
    b = beta if isinstance(beta, Fraction) else Fraction(str(beta))
    x0 = x0 if isinstance(x0, Fraction) else Fraction(str(x0))
    xs, _, _, _ = _simulate(b, tau, ef, nesterov, x0, steps + 1, floor)
    return xs


def _periodic_momentum(beta: Fraction, xs_per: list, tau: int, t: int, p: int, start: int):
    """m*_t = (1−β)/(1−β^p) Σ_{j<p} β^j x*_{t−τ−j} (x* periodic with period p from start)."""
    def xp(i):
        return xs_per[(i - start) % p]
    if beta == 0:
        return xp(t - tau)
    tot = sum(beta**j * xp(t - tau - j) for j in range(p))
    return (1 - beta) / (1 - beta**p) * tot


def _as_fraction(v) -> Fraction:
    return v if isinstance(v, Fraction) else Fraction(str(v))


@cache
def cycle(beta, tau: int, ef: bool = False, nesterov: bool = False, x0=Fraction(3, 10),
          max_steps: int = 20000, floor: Floor | None = None) -> Cycle:
    """The certified limit cycle of the 1-D model from x₀ (units of η), see module docstring.

    ``beta`` and ``x0`` are converted to exact fractions (``Fraction(str(b))`` for floats).
    ``floor``: the production normalisation floor (:class:`Floor`); the certified cycle itself
    must then stay above it (its margin exceeds the threshold), so on the cycle every step is
    a full ±η."""
    b, x0 = _as_fraction(beta), _as_fraction(x0)
    if not (0 <= b < 1):
        raise ValueError(f"beta must lie in [0, 1), got {beta!r}")
    if not (isinstance(tau, int) and tau >= 0):
        raise ValueError(f"tau must be an integer >= 0, got {tau!r}")
    if ef and tau < 1:
        raise ValueError("EF needs a delay tau >= 1")
    T = 256
    while T <= max_steps:
        xs, ss, ms, us = _simulate(b, tau, ef, nesterov, x0, T, floor)
        found = _certify(b, tau, ef, nesterov, xs, ss, ms, us, floor)
        if found is not None:
            start, p, margin, locked = found
            xper = tuple(xs[start:start + p])
            sper = tuple(ss[start:start + p])
            if ef:
                wper = tuple(xs[t] + us[t - 1] for t in range(start, start + p))
            else:
                wper = xper
            n = locked + 2 * p + 1
            short = tuple(t for t in range(min(n, T)) if us[t] != ss[t])
            traj = xs[:n] if n <= T else \
                _simulate(b, tau, ef, nesterov, x0, n, floor)[0]
            return Cycle(b, tau, ef, nesterov, x0, start, p, xper, wper, sper, margin,
                         locked, tuple(traj), short)
        T *= 2
    raise RuntimeError(f"no certified cycle within {max_steps} steps for beta={beta}, "
                       f"tau={tau}, ef={ef}, nesterov={nesterov}, x0={x0}")


def _certify(b, tau, ef, nesterov, xs, ss, ms, us, floor=None):
    r"""(start, period, margin, locked_at) if the tail of the run is certified periodic for
    ever, else None. Certificate: x and s periodic over the last three periods with
    Σ s* = 0; the periodic momentum m* (module docstring) gives v* with the same signs and
    margin μ = min∣v*∣ above the floor; the deviation e_t = m_t − m*_t is multiplied by β each
    step once x_{t−τ} is periodic, so once coef·∣e_t∣ < μ − floor (coef = 1, or β for Nesterov)
    every later ∣v_t∣ stays above the floor with the sign of v*_t, and the orbit repeats."""
    T = len(xs)
    tail = T // 2
    for p in range(1, tail // 4 + 1):
        if all(ss[t] == ss[t - p] and us[t] == us[t - p] for t in range(T - 3 * p, T)) and \
                all(xs[t] == xs[t - p] for t in range(T - 3 * p, T)):
            break
    else:
        return None
    # earliest start of the periodic regime (signs and x periodic from there on)
    start = T - 3 * p
    while start - 1 >= tau + 1 and ss[start - 1] == ss[start - 1 + p] and \
            us[start - 1] == us[start - 1 + p] and xs[start - 1] == xs[start - 1 + p]:
        start -= 1
    if sum(ss[start:start + p]) != 0 or any(u != s for u, s in
                                            zip(us[start:start + p], ss[start:start + p])):
        return None
    xper = list(xs[start:start + p])
    # periodic momentum and its margin
    vstar = []
    for t in range(start, start + p):
        mstar = _periodic_momentum(b, xper, tau, t, p, start)
        g = xper[(t - tau - start) % p]
        vstar.append((1 - b) * g + b * mstar if nesterov else mstar)
    if any(_sign(v) != s for v, s in zip(vstar, ss[start:start + p])):
        return None
    margin = min(abs(v) for v in vstar)
    slack = margin - (floor.threshold if floor is not None else 0)
    if slack <= 0:
        return None
    # the deviation e_t = m_t − m*_t contracts by β once x_{t−τ} is periodic (t ≥ start+τ)
    coef = b if nesterov else 1
    for t in range(start + tau + p, T):
        e = ms[t] - _periodic_momentum(b, xper, tau, t, p, start)
        if coef * abs(e) < slack:
            return start, p, float(margin), t
    return None


def amplitude_formula(beta, tau, nesterov: bool = False) -> float:
    r"""Harmonic-balance amplitude of the no-EF cycle in units of η, π/(2ω*)
    (:func:`harmonic_balance_amplitude`)."""
    return harmonic_balance_amplitude(float(beta), tau, nesterov)


def amplitude_table(betas=(0.0, 0.5, 0.8, 0.9, 0.95), taus=(0, 1, 2, 3),
                    x0=Fraction(3, 10)) -> list[dict]:
    """Every certified cycle of the grid: one row per (τ, β, EF, Nesterov) with the amplitude
    and mean ∣·∣ at the iterate x and the virtual point w (units of η), and the formula."""
    rows = []
    for t in taus:
        for b in betas:
            for ef in (False, True):
                if ef and t == 0:
                    continue
                for nes in (False, True):
                    c = cycle(b, t, ef, nes, x0)
                    rows.append({"tau": t, "beta": float(b), "ef": ef, "nesterov": nes,
                                 "period": c.period, "amplitude": float(c.amplitude),
                                 "mean_abs": float(c.mean_abs),
                                 "virtual_amplitude": float(c.virtual_amplitude),
                                 "virtual_mean_abs": float(c.virtual_mean_abs),
                                 "formula": None if ef else amplitude_formula(b, t, nes),
                                 "locked_at": c.locked_at})
    return rows


def momentum_shrinks(rows: list[dict], key: str = "amplitude") -> list[dict]:
    """The rows where a larger β gives a strictly smaller ``key`` than the next smaller β at
    the same (τ, EF, Nesterov)."""
    out = []
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["tau"], r["ef"], r["nesterov"]), []).append(r)
    for rs in groups.values():
        rs = sorted(rs, key=lambda r: r["beta"])
        for a, b in zip(rs, rs[1:]):
            if b[key] < a[key]:
                out.append({"tau": b["tau"], "ef": b["ef"], "nesterov": b["nesterov"],
                            "beta_from": a["beta"], "beta_to": b["beta"],
                            key + "_from": a[key], key + "_to": b[key]})
    return out


# --------------------------------------------------------------------------- sympy steps
def harmonic_balance_omega(beta, tau, nesterov: bool = False) -> float:
    r"""The smallest ω* ∈ (0, π] with (τ + ½)ω + φ_β(ω) = π/2 (module docstring; φ the
    phase lag of the momentum filter)."""
    import math

    def phase(w):
        lag = math.atan2(beta * math.sin(w), 1 - beta * math.cos(w))
        if nesterov:
            lag -= math.atan2(beta * math.sin(w), 1 + beta - beta * math.cos(w))
        return (tau + 0.5) * w + lag - math.pi / 2

    grid = [math.pi * (i + 1) / 4096 for i in range(4096)]
    prev_w, prev = 1e-12, phase(1e-12)
    for w in grid:
        v = phase(w)
        if prev < 0 <= v:
            lo, hi = prev_w, w
            for _ in range(80):
                mid = 0.5 * (lo + hi)
                if phase(mid) < 0:
                    lo = mid
                else:
                    hi = mid
            return 0.5 * (lo + hi)
        prev_w, prev = w, v
    return math.pi


def harmonic_balance_amplitude(beta, tau, nesterov: bool = False) -> float:
    """A ≈ N/2 = π/(2ω*) in units of η (no EF)."""
    import math

    return math.pi / (2 * harmonic_balance_omega(beta, tau, nesterov))


def _steps() -> list[Step]:
    om = sp.Symbol("omega", positive=True)
    c_ = sp.Symbol("c", positive=True)
    s1 = Step("MC1 integrator phase", "identity",
              eq(sp.cos(om) - 1 + sp.I * sp.sin(om),
                 2 * sp.I * sp.sin(om / 2) * (sp.cos(om / 2) + sp.I * sp.sin(om / 2))),
              r"$1/(e^{i\omega} - 1) = e^{-i\omega/2}/(2i\sin(\omega/2))$: the integrator "
              r"$x_{t+1} = x_t - \eta s_t$ lags $\pi/2 + \omega/2$")
    s2 = Step("MC2 heavy-ball phase", "identity",
              eq(sp.expand_complex(1 - beta * sp.exp(-sp.I * om)),
                 1 - beta * sp.cos(om) + sp.I * beta * sp.sin(om)),
              r"$H = (1-\beta)/(1 - \beta e^{-i\omega})$: its lag is "
              r"$\arctan\bigl(\beta\sin\omega/(1 - \beta\cos\omega)\bigr)$")
    s3 = Step(r"MC3 $\beta = 0$: T1's tightness orbit", "identity",
              eq((tau + sp.Rational(1, 2)) * sp.pi / (2 * tau + 1), sp.pi / 2),
              r"$\omega^* = \pi/(2\tau + 1)$, $N = 2\tau + 1$, $A = (\tau + \frac12)\eta$ "
              "(`delayed_lmo` TI3)")
    s4 = Step(r"MC4 large-$\beta$ balance", "identity",
              eq((tau * om - c_ / om).subs(om, sp.sqrt(c_ / tau)), 0),
              r"$\varphi \approx \pi/2 - \omega/2 - (1-\beta)/\omega$ for $\beta \to 1$: the "
              r"balance $\tau\omega = (1-\beta)/\omega$ gives $\omega^* = \sqrt{(1-\beta)/\tau}$, "
              r"$A \approx \frac{\pi}{2}\sqrt{\tau/(1-\beta)}\,\eta$ ($c = 1 - \beta$)")
    sn, d_ = sp.symbols("s_omega d_omega", nonnegative=True)
    s5 = Step("MC5 Nesterov lags less", "inequality",
              ge(beta * sn / (1 + beta * d_), 0),
              r"Nesterov's lag is the heavy-ball lag minus "
              r"$\arctan\bigl(\beta\sin\omega/(1 + \beta - \beta\cos\omega)\bigr)$, whose "
              r"argument $\beta s/(1 + \beta d)$ ($s = \sin\omega \ge 0$, $d = 1 - \cos\omega "
              r"\ge 0$) is $\ge 0$",
              domain={})
    s6 = Step("MC6 momentum lag is non-negative", "inequality",
              ge(beta * sn / (1 - beta + beta * d_), 0),
              r"$\beta\sin\omega/(1 - \beta\cos\omega) \ge 0$ on $(0, \pi)$: momentum adds "
              r"phase lag, so without EF the balance frequency falls and the cycle grows with "
              r"$\beta$")
    s7 = Step("MC7 harmonic balance", "cited",
              eq((tau + sp.Rational(1, 2)) * om + sp.Symbol(r"\varphi_\beta(\omega)"),
                 sp.pi / 2),
              "describing-function (first-harmonic) balance of a relay loop: an approximation; "
              "the exact cycles are computed and certified by `muon_cycle.cycle`")
    s8 = Step("MC8 locking certificate", "cited",
              ge(sp.Symbol(r"\min_t|v^*_t|"), sp.Symbol(r"\beta^{t-t_1}|e_{t_1}|")),
              r"$e_t = m_t - m^*_t$ satisfies $e_t = \beta e_{t-1}$ once $x_{t-\tau}$ is periodic "
              r"(linearity of the EMA); if $|e|$ ($\beta|e|$ for Nesterov) is below the margin "
              r"$\min_t |v^*_t|$ at one $t_1$, $\operatorname{sign}(v_t) = s^*_t$ for all "
              r"$t \ge t_1$; checked in exact rational arithmetic by `muon_cycle.cycle`")
    return [s1, s2, s3, s4, s5, s6, s7, s8]


@cache
def result() -> Result:
    """The MC :class:`~theory.assumptions.Result`: the lag identities behind the amplitude."""
    return Result(
        name="MC",
        title="Muon (1-D: sign descent) under delay: limit-cycle amplitude",
        quantity="amplitude max|x*| of the limit cycle (no EF), units of eta",
        quantity_latex=r"\max_t|x^*_t|/\eta",
        statement=sp.pi / (2 * sp.Symbol("omega^*", positive=True)),
        params=(sp.Symbol("omega^*", positive=True),),
        steps=_steps(),
        assumptions=("quadratic f = h x^2/2",),
        legend={sp.Symbol("omega^*", positive=True): r"root of $(\tau + \frac12)\omega + "
                r"\varphi_\beta(\omega) = \pi/2$ (harmonic balance)"},
        relation="=",
        notes="approximate (harmonic balance); the exact cycle is computed and certified by "
              "theory.muon_cycle.cycle",
    )


__all__ = ["Cycle", "cycle", "trajectory", "amplitude_formula", "amplitude_table",
           "harmonic_balance_omega", "harmonic_balance_amplitude", "momentum_shrinks",
           "result"]
