r"""MC — Muon's own stability: delayed Muon on a quadratic settles onto limit cycles.

T3 is exact for SGD with momentum, whose iterates diverge past a critical step. Muon does not
diverge: its step has a fixed length η, so on a quadratic the delayed iterates end on a
*limit cycle*. This module computes and certifies the cycle that one start reaches;
:mod:`theory.muon_attractors` enumerates the whole set of them, and every statement below
about how the cycle depends on β, τ and EF is a statement over that set.

**1-D is sign descent.** For a 1×1 parameter the exact LMO of the spectral ball is
sign(v) (the polar factor of a scalar), and the production Newton–Schulz returns
s₀·sign(v) with the constant s₀ = φ(1) (5 quintic steps; ``verify/`` uses lr = η/s₀), as long
as ∣v∣ is at least its normalisation floor ε = 10⁻⁷; below it the step is shorter
(:class:`Floor` models that). On f(x) = h x²/2 (h > 0) the method is

.. math::
    m_t = \beta m_{t-1} + (1-\beta) h x_{t-\tau},\qquad m_{\tau-1} = 0,

.. math::
    v_t = m_t\ \text{(heavy ball) or } (1-\beta) h x_{t-\tau} + \beta m_t\ \text{(Nesterov)},

.. math::
    u_t = \eta\,\mathrm{sign}(v_t),\qquad x_{t+1} = x_t - u_t\ \text{(no EF), or}

.. math::
    x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}\ \text{(EF}(\gamma)\text{)},\qquad
    u_{\tau-1} = 0

(the paper's EF is γ = 1),

for t ≥ τ, and :math:`x_{t+1} = x_t` for t < τ (the idle start of ``DelayedOptimizer``). h
drops out (sign is scale invariant): **the cycle does not depend on the curvature**. It does
depend on the start x₀, not only on its lattice offset x₀/η mod 1: starts on the same lattice
can reach different cycles (see :mod:`theory.muon_attractors`). Every iterate stays on the
lattice x₀ + ηℤ (on x₀ + (η/q)ℤ for EF(γ) with γ = p/q).

**Exact cycle (computed, certified).** :func:`cycle` runs the recursion in exact rational
arithmetic until the sign sequence repeats, then *certifies* the cycle: for the periodic sign
pattern s* of period p (with Σ s* = 0 over a period, so x is periodic), the periodic momentum
is the fixed point

.. math::  m^*_t = \frac{1-\beta}{1-\beta^p}\sum_{j=0}^{p-1}\beta^j h x^*_{t-\tau-j},

and the deviation :math:`e_t = m_t - m^*_t` obeys :math:`e_t = \beta e_{t-1}` once x is
periodic. If the deviation (times β for Nesterov) is below the margin :math:`\min_t |v^*_t|`,
the sign pattern is locked for ever (step MC8). Amplitude, one definition with two numbers:
the maximum :math:`\max_t|x^*_t|` (:attr:`Cycle.amplitude`) and the half peak-to-peak
:math:`(\max_t x^*_t - \min_t x^*_t)/2` (:attr:`Cycle.half_p2p`); also the mean of
:math:`|x^*|` (what the T1 bound measures) and the floor :math:`h\eta^2\,\overline{x^{*2}}/2`.

**Harmonic balance (steps MC1–MC7), an approximation.** The loop s → x → v → s is a relay
(s = sign v) around a linear system: the integrator, the delay :math:`z^{-\tau}` and the
momentum filter :math:`H(z) = (1-\beta)/(1 - \beta z^{-1})` (heavy ball) or
:math:`(1-\beta)(1 + \beta - \beta z^{-1})/(1 - \beta z^{-1})` (Nesterov, MC5). A relay
oscillation of half-period N (frequency ω = π/N) closes when the phase lags add up to a
quarter period beyond the integrator's: the integrator lags π/2 + ω/2 (MC1), the delay τω,
the momentum :math:`\varphi_\beta(\omega) = \arctan(\beta\sin\omega/(1 - \beta\cos\omega))`
(heavy ball, MC2; Nesterov subtracts a non-negative lead, MC5), so

.. math::  \Big(\tau + \tfrac12\Big)\omega + \varphi_\beta(\omega) = \frac{\pi}{2},\qquad
           N = \frac{\pi}{\omega^*},\qquad A_\mathrm{HB} = \frac{N}{2}\,\eta .

At β = 0 it gives ω* = π/(2τ+1) and :math:`A_\mathrm{HB} = (\tau + \frac12)\eta` (MC3), which
is exact for the half peak-to-peak of every certified cycle (T1's tightness orbit; MA2 checks
it from every start of the grid), not for max∣x∣, which exceeds it by the distance of the
cycle's midpoint from 0 and so varies with the offset. For β → 1 (heavy ball, τ ≥ 1) the
balance gives ω* ≈ √((1−β)/τ),
:math:`A_\mathrm{HB} \approx \frac{\pi}{2}\sqrt{\tau/(1-\beta)}\,\eta` (MC4): the
harmonic-balance amplitude grows like :math:`(1-\beta)^{-1/2}`, not like the EMA's mean lag
β/(1−β). Against the certified sets the approximation *underestimates* at large β:
it stays below the start-averaged half peak-to-peak there and never exceeds the worst case
(MA5); the book gives the numbers.

**Momentum and EF, over the set of cycles** (:mod:`theory.muon_attractors`, exact, on the
grids stated there). The heavy-ball lag grows with β (MC6, a monotonicity certificate), so
the harmonic-balance cycle grows with β. For the certified cycles the corresponding statement
is checked, not inferred: with or without EF, the worst and the start-averaged half
peak-to-peak never decrease as β grows (MA3). With EF, max∣x∣ and the floor can (MA3b: EF with
Nesterov at τ = 1 from β = 0 to ½, the cycle keeps its size and its midpoint moves towards
0). EF's effect changes sign with β (MA4, checked at τ = 1, 2): for β ≤ ½ it raises the
start-averaged floor and does not shrink the cycle; at β = 0.9 it lowers both (the book's
table has the other delays). A comparison of one start with EF against one start without says
nothing about which of these holds.

**Matrices.** For a diagonal (or any fixed-singular-vector) quadratic and the *exact* polar
factor, Muon's step is :math:`\mathrm{diag}(\mathrm{sign}(v_i))`: the coordinates decouple into
independent 1-D cycles, each independent of its curvature :math:`h_i`. The production
Newton–Schulz is an inexact polar factor: a diagonal input stays diagonal, but coordinate i
moves by :math:`\mathrm{lr}\cdot\varphi(|v_i|/\|v\|_F)` (inside
BAND's [0, 1+ε₁]·lr), which depends on the other coordinates, so the lattice and the exact
orbit are lost. What carries over is the band-level statement that ``verify/``'s
``P9.diagonal`` checks on production Muon (h = 1, 3, 10): every coordinate cycles with an
amplitude within a band around the certified 1-D amplitude, whatever :math:`h_i`. Non-commuting
(non-diagonal) quadratics are not covered.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import sympy as sp

from .assumptions import Result, Step, TexSymbol, beta, eq, ge, tau


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
    ws: tuple             # virtual points w*_t = x*_t + γu*_{t-1} (EF(γ)), else = xs
    signs: tuple          # s*_t over one period
    margin: float         # min |v*_t| / h over the period (> 0)
    locked_at: int        # step from which the certificate guarantees the pattern for ever
    trajectory: tuple     # x_t for t = 0 .. locked_at + 2 period (units of η)
    floor_steps: tuple = ()  # production steps t at which the step was shortened by the floor
    gamma: Fraction = Fraction(1)  # EF(γ)'s coefficient (meaningful with ef)

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
        r"""The mean of ∣x*∣ over one period, in units of η, i.e.
        :math:`\frac1K\sum_k |y_k|/\eta` over whole periods."""
        return sum(abs(x) for x in self.xs) / self.period

    @property
    def mean_sq(self) -> Fraction:
        """The mean of x*² over one period, in units of η²; the loss floor is hη²·mean_sq/2."""
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
              floor: Floor | None = None, gamma: Fraction = Fraction(1)):
    r""":math:`x_t, s_t, m_t, u_t` (t < T) of the exact model (η = h = 1) from rest (zero
    momentum, :math:`u_{\tau-1} = 0`, τ idle steps); :math:`s_t = u_t = 0` for idle steps.
    :math:`u_t = s_t = \operatorname{sign}(v_t)`, except where
    :math:`0 < |v_t| <` ``floor.threshold`` (then :math:`u_t` = ``floor.step(v_t)``). With EF
    the step is EF(γ)'s :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}` (γ = 1: the
    paper's EF)."""
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
        x = x - ((1 + gamma) * u - gamma * u_prev if ef else u)
        u_prev = u
    return xs, ss, ms, us


def _simulate_lattice(beta: Fraction, tau: int, ef: bool, nesterov: bool, x0: Fraction, T: int,
                      gamma: Fraction = Fraction(1)):
    r""":func:`_simulate` without a floor, in integers: the same orbit, much faster over long
    runs. Every x_t lies on (1/Q)ℤ, Q = lcm(den x₀, den γ), so x_t = X_t/Q; with β = a/b and
    k momentum updates so far, m_t = M_t/(Q b^k) with the integer recursion
    M_t = a M_{t−1} + (b − a) b^{k−1} X_{t−τ}, so sign(m_t) = sign(M_t) and Nesterov's
    sign((1−β)g + βm) = sign((b − a) X_{t−τ} b^k + a M_t). Returns x_t, s_t, u_t (t < T) and
    m_{T−1} (exact)."""
    a_, b_ = beta.numerator, beta.denominator
    Q = math.lcm(x0.denominator, gamma.denominator)
    X0 = x0.numerator * (Q // x0.denominator)
    G = gamma.numerator * (Q // gamma.denominator)       # γQ, an integer
    Xs, ss = [], []
    X, M, P, k, s_prev = X0, 0, 1, 0, 0               # P = b^(k-1) after an update
    for t in range(T):
        Xs.append(X)
        if t < tau:
            ss.append(0)
            continue
        g = Xs[t - tau]
        if k:
            P *= b_
        k += 1
        M = a_ * M + (b_ - a_) * P * g
        s = _sign((b_ - a_) * g * P * b_ + a_ * M if nesterov else M)
        ss.append(s)
        X -= (Q + G) * s - G * s_prev if ef else Q * s
        s_prev = s
    xs = [Fraction(v, Q) for v in Xs]
    m_last = Fraction(M, Q * P * b_) if k else Fraction(0)
    return xs, ss, [Fraction(v) for v in ss], m_last


def trajectory(beta, tau: int, ef: bool = False, nesterov: bool = False, x0=Fraction(3, 10),
               steps: int = 100, floor: Floor | None = None,
               gamma=Fraction(1)) -> list[Fraction]:
    """The iterates divided by η, t = 0..steps, of the exact 1-D model (exact rationals;
    ``beta``, ``x0`` as fractions or strings)."""
    b = beta if isinstance(beta, Fraction) else Fraction(str(beta))
    x0 = x0 if isinstance(x0, Fraction) else Fraction(str(x0))
    gam = _as_fraction(gamma)
    if floor is None:
        return _simulate_lattice(b, tau, ef, nesterov, x0, steps + 1, gam)[0]
    return _simulate(b, tau, ef, nesterov, x0, steps + 1, floor, gam)[0]


def _periodic_momentum(beta: Fraction, xs_per: list, tau: int, t: int, p: int, start: int):
    """m*_t = (1−β)/(1−β^p) Σ_{j<p} β^j x*_{t−τ−j} (x* periodic with period p from start)."""
    def xp(i):
        return xs_per[(i - start) % p]
    if beta == 0:
        return xp(t - tau)
    tot, w = Fraction(0), Fraction(1)
    for j in range(p):
        tot += w * xp(t - tau - j)
        w *= beta
    return (1 - beta) / (1 - w) * tot


def _as_fraction(v) -> Fraction:
    return v if isinstance(v, Fraction) else Fraction(str(v))


@cache
def cycle(beta, tau: int, ef: bool = False, nesterov: bool = False, x0=Fraction(3, 10),
          max_steps: int = 2**16, floor: Floor | None = None, gamma=Fraction(1)) -> Cycle:
    """The certified limit cycle of the 1-D model from x₀ (units of η), see module docstring.

    ``beta`` and ``x0`` are converted to exact fractions (``Fraction(str(b))`` for floats).
    ``floor``: the production normalisation floor (:class:`Floor`); the certified cycle itself
    must then stay above it (its margin exceeds the threshold), so on the cycle every step is
    a full ±η. ``gamma``: EF(γ)'s coefficient (only with ``ef``; γ = 1 is the paper's EF)."""
    b, x0, gam = _as_fraction(beta), _as_fraction(x0), _as_fraction(gamma)
    if not (0 <= b < 1):
        raise ValueError(f"beta must lie in [0, 1), got {beta!r}")
    if not (isinstance(tau, int) and tau >= 0):
        raise ValueError(f"tau must be an integer >= 0, got {tau!r}")
    if ef and tau < 1:
        raise ValueError("EF needs a delay tau >= 1")
    T = 256
    while T <= max_steps:
        if floor is None:
            xs, ss, us, m_last = _simulate_lattice(b, tau, ef, nesterov, x0, T, gam)
        else:
            xs, ss, ms, us = _simulate(b, tau, ef, nesterov, x0, T, floor, gam)
            m_last = ms[-1]
        found = _certify(b, tau, nesterov, xs, ss, m_last, us, floor)
        if found is not None:
            start, p, margin, locked = found
            xper = tuple(xs[start:start + p])
            sper = tuple(ss[start:start + p])
            if ef:
                wper = tuple(xs[t] + gam * us[t - 1] for t in range(start, start + p))
            else:
                wper = xper
            n = locked + 2 * p + 1
            short = tuple(t for t in range(min(n, T)) if us[t] != ss[t])
            traj = xs[:n] if n <= T else trajectory(b, tau, ef, nesterov, x0, n - 1, floor, gam)
            return Cycle(b, tau, ef, nesterov, x0, start, p, xper, wper, sper, margin,
                         locked, tuple(traj), short, gam)
        T *= 2
    raise RuntimeError(f"no certified cycle within {max_steps} steps for beta={beta}, "
                       f"tau={tau}, ef={ef}, nesterov={nesterov}, x0={x0}")


def _certify(b, tau, nesterov, xs, ss, m_last, us, floor=None):
    r"""(start, period, margin, locked_at) if the tail of the run is certified periodic for
    ever, else None. Certificate: x and s periodic over the last three periods with
    Σ s* = 0; the periodic momentum m* (module docstring) gives v* with the same signs and
    margin μ = min∣v*∣ above the floor; the deviation e_t = m_t − m*_t is multiplied by β each
    step once x_{t−τ} is periodic, so once coef·∣e_t∣ < μ − floor (coef = 1, or β for Nesterov)
    every later ∣v_t∣ stays above the floor with the sign of v*_t, and the orbit repeats.
    ``m_last`` is the exact m_{T−1}; e_t = e_{T−1}/β^{T−1−t} on the periodic stretch gives the
    first step at which the certificate holds."""
    T = len(xs)
    for p in range(1, T // 8 + 1):
        if all(ss[t] == ss[t - p] and us[t] == us[t - p] for t in range(T - 3 * p, T)) and \
                all(xs[t] == xs[t - p] for t in range(T - 3 * p, T)):
            # the last three periods repeat with period p; a shorter repeat near the end can
            # be part of a longer cycle, so a failed certificate moves on to the next p
            found = _certify_period(b, tau, nesterov, xs, ss, m_last, us, floor, p)
            if found is not None:
                return found
    return None


def _certify_period(b, tau, nesterov, xs, ss, m_last, us, floor, p):
    """:func:`_certify` for one candidate period p."""
    T = len(xs)
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
    # m*_start in closed form, then the EMA recursion m*_t = βm*_{t−1} + (1−β)x*_{t−τ}
    vstar, mstar = [], _periodic_momentum(b, xper, tau, start, p, start)
    for t in range(start, start + p):
        g = xper[(t - tau - start) % p]
        if t > start:
            mstar = b * mstar + (1 - b) * g
        vstar.append((1 - b) * g + b * mstar if nesterov else mstar)
    if any(_sign(v) != s for v, s in zip(vstar, ss[start:start + p])):
        return None
    margin = min(abs(v) for v in vstar)
    slack = margin - (floor.threshold if floor is not None else 0)
    if slack <= 0:
        return None
    # the deviation e_t = m_t − m*_t contracts by β once x_{t−τ} is periodic (t ≥ start+τ)
    coef = b if nesterov else 1
    first = start + tau + p
    if first > T - 1:
        return None
    e = abs(m_last - _periodic_momentum(b, xper, tau, T - 1, p, start))
    if b == 0 or e == 0:
        return start, p, float(margin), first
    if not coef * e < slack:
        return None
    # the earliest t ≥ first at which the (larger) earlier deviation coef·e/β^(T−1−t) still
    # certifies: j = T−1−t as large as possible with coef·e < slack·β^j (a float estimate of
    # j from logarithms of the exact values, then corrected by exact comparisons)
    def ok(j):
        return coef * e < slack * b**j

    def log(q):
        return math.log(q.numerator) - math.log(q.denominator)

    j = min(T - 1 - first, max(0, int((log(slack) - log(coef * e)) / -log(b))))
    while j > 0 and not ok(j):
        j -= 1
    while j < T - 1 - first and ok(j + 1):
        j += 1
    return start, p, float(margin), T - 1 - j


def amplitude_formula(beta, tau, nesterov: bool = False) -> float:
    r"""Harmonic-balance amplitude of the no-EF cycle in units of η, π/(2ω*)
    (:func:`harmonic_balance_amplitude`)."""
    return harmonic_balance_amplitude(float(beta), tau, nesterov)


# --------------------------------------------------------------------------- sympy steps
def harmonic_balance_omega(beta, tau, nesterov: bool = False) -> float:
    r"""The smallest ω* ∈ (0, π] with
    :math:`(\tau + \frac12)\omega + \varphi_\beta(\omega) = \pi/2` (module docstring; φ the
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
    # e^{-iω} as a placeholder, so the step displays the relation it checks; the model
    # (Euler's formula, expanded by sympy) is what the check substitutes
    e_ = sp.Symbol(r"e^{-i\omega}")
    euler = {e_: sp.expand_complex(sp.exp(-sp.I * om))}
    s2 = Step("MC2 heavy-ball phase", "identity",
              eq(1 - beta * e_, 1 - beta * sp.cos(om) + sp.I * beta * sp.sin(om)),
              r"$H = (1-\beta)/(1 - \beta e^{-i\omega})$: its lag is "
              r"$\arctan\bigl(\beta\sin\omega/(1 - \beta\cos\omega)\bigr)$", model=euler)
    lag = sp.atan(beta * sp.sin(om) / (1 - beta * sp.cos(om)))
    w_ = sp.Symbol("w")
    s3 = Step(r"MC3 $\beta = 0$: the balance frequency", "definition",
              eq(((tau + sp.Rational(1, 2)) * om + lag).subs(beta, 0).subs(
                  om, sp.pi / (2 * tau + 1)), sp.pi / 2),
              r"with no momentum lag the balance $(\tau + \frac12)\omega = \pi/2$ has the root "
              r"$\omega^* = \pi/(2\tau + 1)$, so $A_\mathrm{HB} = (\tau + \frac12)\eta$: a "
              r"consistency check of the balance, not a statement about the cycles. That every "
              r"certified cycle at $\beta = 0$ has half peak-to-peak $(\tau + \frac12)\eta$ "
              r"(and a larger $\max|x|$) is checked in exact arithmetic over the start grid "
              r"(`muon_attractors` MA2)")
    s4 = Step(r"MC4 large-$\beta$ balance", "assumption",
              eq((tau * om - c_ / om).subs(om, sp.sqrt(c_ / tau)), 0),
              r"assumed asymptotics $\varphi \approx \pi/2 - \omega/2 - (1-\beta)/\omega$ for "
              r"$\beta \to 1$ ($c = 1 - \beta$); the balance $\tau\omega = (1-\beta)/\omega$ then "
              r"gives $\omega^* = \sqrt{(1-\beta)/\tau}$ and $A_\mathrm{HB} \approx "
              r"\frac{\pi}{2}\sqrt{\tau/(1-\beta)}\,\eta$. Checked numerically against the "
              r"balance's root (`verify/test_muon_cycle.py`), not proved")
    sn, d_ = sp.symbols("s_omega d_omega", nonnegative=True)
    s5a = Step("MC5a Nesterov filter", "identity",
               eq((1 - beta) + beta * (1 - beta) / (1 - beta * w_),
                  (1 - beta) * (1 + beta - beta * w_) / (1 - beta * w_)),
               r"$v = (1-\beta)g + \beta m$ with $m = (1-\beta)g/(1 - \beta z^{-1})$: "
               r"$H_N = (1-\beta)(1 + \beta - \beta z^{-1})/(1 - \beta z^{-1})$ ($w = z^{-1}$); "
               r"its phase is the heavy-ball lag minus the phase of $1 + \beta - \beta "
               r"e^{-i\omega}$")
    s5b = Step("MC5b Nesterov's numerator", "identity",
               eq(1 + beta - beta * e_, 1 + beta - beta * sp.cos(om) + sp.I * beta * sp.sin(om)),
               r"the phase of $1 + \beta - \beta e^{-i\omega}$ is "
               r"$\arctan\bigl(\beta\sin\omega/(1 + \beta - \beta\cos\omega)\bigr)$",
               model=euler)
    s5 = Step("MC5 Nesterov lags less", "inequality",
              ge(beta * sn / (1 + beta * d_), 0),
              r"that phase is a lead: its argument $\beta s/(1 + \beta d)$ "
              r"($s = \sin\omega \ge 0$, $d = 1 - \cos\omega \ge 0$ on $(0, \pi)$) is "
              r"$\ge 0$, so by MC5a–MC5b Nesterov's lag is at most the heavy-ball lag",
              domain={})
    s6 = Step(r"MC6 momentum lag grows with $\beta$", "monotonicity",
              ge(sp.diff(beta * sn / (1 - beta + beta * d_), beta), 0),
              r"the heavy-ball lag's argument $\beta s/(1 - \beta\cos\omega) = \beta s/(1 - \beta "
              r"+ \beta d)$ is non-decreasing in $\beta$ (its derivative "
              r"$s/(1 - \beta + \beta d)^2 \ge 0$, certified) and arctan is increasing: the "
              r"balance frequency falls and $A_\mathrm{HB}$ grows with $\beta$. This is about "
              r"the harmonic balance; for the certified cycles the monotonicity in $\beta$ is "
              r"checked on the grid by `muon_attractors` MA3",
              mono=(beta * sn / (1 - beta + beta * d_), beta, 1, None))
    s7 = Step("MC7 harmonic balance", "cited",
              eq((tau + sp.Rational(1, 2)) * om + sp.Symbol(r"\varphi_\beta(\omega)"),
                 sp.pi / 2),
              "describing-function (first-harmonic) balance of a relay loop: an approximation; "
              "the exact cycles are computed and certified by `muon_cycle.cycle`")
    s8 = Step("MC8 locking certificate", "reasoning",
              ge(TexSymbol(r"\min_t\lvert v^*_t\rvert"),
                 TexSymbol(r"\beta^{t-t_1}\lvert e_{t_1}\rvert")),
              r"$e_t = m_t - m^*_t$ satisfies $e_t = \beta e_{t-1}$ once $x_{t-\tau}$ is periodic "
              r"(linearity of the EMA); if $|e|$ ($\beta|e|$ for Nesterov) is below the margin "
              r"$\min_t |v^*_t|$ at one $t_1$, $\operatorname{sign}(v_t) = s^*_t$ for all "
              r"$t \ge t_1$; checked in exact rational arithmetic by `muon_cycle.cycle`")
    return [s1, s2, s3, s4, s5a, s5b, s5, s6, s7, s8]


@cache
def result() -> Result:
    """The MC :class:`~theory.assumptions.Result`: the lag identities behind the
    harmonic-balance amplitude."""
    return Result(
        name="MC",
        title="Muon (1-D: sign descent) under delay: the harmonic-balance cycle amplitude",
        quantity="harmonic-balance amplitude of the no-EF cycle, units of eta (an "
                 "approximation of the half peak-to-peak, below it at large beta)",
        quantity_latex=r"A_\mathrm{HB}/\eta",
        statement=sp.pi / (2 * sp.Symbol("omega^*", positive=True)),
        params=(sp.Symbol("omega^*", positive=True),),
        steps=_steps(),
        assumptions=("quadratic f = h x^2/2",),
        legend={sp.Symbol("omega^*", positive=True): r"root of $(\tau + \frac12)\omega + "
                r"\varphi_\beta(\omega) = \pi/2$ (harmonic balance)"},
        relation="=",
        notes="approximate (harmonic balance); the exact cycles are computed and certified by "
              "theory.muon_cycle.cycle and enumerated as a set by theory.muon_attractors",
    )


__all__ = ["Floor", "Cycle", "cycle", "trajectory", "amplitude_formula",
           "harmonic_balance_omega", "harmonic_balance_amplitude", "result"]
