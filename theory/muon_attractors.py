r"""MA — delayed 1-D Muon as a *set* of attractors: every certified cycle reachable from rest.

:mod:`theory.muon_cycle` certifies the cycle that one start reaches. The cycle is not unique:
on the same lattice several cycles coexist (different periods and amplitudes), and every
lattice offset x₀/η mod 1 has its own. A statement about "the" cycle from one start is a
statement about one member of the set. This module enumerates the set and states results
over it.

**What is enumerated.** For a variant V = (β, τ, heavy ball / Nesterov, no EF / EF(γ)) and a
grid of J offsets :math:`o \in \{\frac{1}{2J}, \frac{3}{2J}, \dots, \frac{2J-1}{2J}\}` (the
midpoints of J equal cells of [0, 1): the grid is symmetric under o → 1 − o, the mirror
x → −x of the map, and avoids the offset 0, on which the iterate can sit exactly at the
minimiser) and radius R (units of η), the starts are

.. math::  \mathcal S_{J,R} = \{\,o + k :\ o = \tfrac{2j+1}{2J},\ 0 \le j < J,\
           k \in \mathbb Z,\ -R \le k < R\,\},

all at rest (zero momentum, τ idle steps: the start of ``DelayedOptimizer``), 2RJ starts. From
each, :func:`theory.muon_cycle.cycle` runs the exact map in rational arithmetic and certifies
the cycle it locks onto (sign pattern and margin, then a contraction certificate for the
momentum's deviation). Every number below is read off certified cycles, exactly.

**One amplitude convention, two numbers.** For a cycle x*: A = max∣x*∣ (what a bound on ∣x∣
sees) and H = (max x* − min x*)/2 (half peak-to-peak: the oscillation's own size; it does not
move with the offset). A ≥ H, and A − H is the distance of the cycle's midpoint from the
minimiser. Also reported: the mean ∣x*∣ (what T1's bound measures) and the floor
F/(hη²) = mean(x*²)/2 (the loss on the cycle).

**Statistics over the set.** *Worst case*: the maximum over the starts. *Start-averaged*
(called offset-averaged: with R = 1 it is the plain average over the J offsets of the start
x₀ = o − 1 and x₀ = o): the mean over 𝒮 with equal weight per start, i.e. each cycle
weighted by its basin share (the fraction of 𝒮 that reaches it). The per-offset averages give
the range. The enumeration is over a finite grid; nothing is claimed about offsets between the
grid points or about starts beyond R, and the grids used are stated where the numbers are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache

from .muon_cycle import Cycle, cycle


@dataclass(frozen=True)
class Variant:
    """One delayed 1-D Muon: β, τ, Nesterov or heavy ball, and EF(γ) (``gamma=None``: no
    EF; γ = 1: the paper's EF)."""

    beta: Fraction
    tau: int
    nesterov: bool = False
    gamma: Fraction | None = None

    @property
    def label(self) -> str:
        mom = "Nesterov" if self.nesterov else "heavy ball"
        ef = "no EF" if self.gamma is None else ("EF" if self.gamma == 1 else
                                                  f"EF(gamma={float(self.gamma):g})")
        return f"beta={float(self.beta):g}, tau={self.tau}, {mom}, {ef}"


def variant(beta, tau: int, nesterov: bool = False, gamma=None) -> Variant:
    """:class:`Variant` with exact fractions (``Fraction(str(v))`` for floats)."""
    def fr(v):
        return v if isinstance(v, Fraction) else Fraction(str(v))
    return Variant(fr(beta), tau, nesterov, None if gamma is None else fr(gamma))


def starts(offsets: int, radius: int) -> list[Fraction]:
    """The start grid of the module docstring, J = ``offsets``, R = ``radius``."""
    if offsets < 1 or radius < 1:
        raise ValueError(f"offsets and radius must be >= 1, got {offsets}, {radius}")
    return [Fraction(2 * j + 1, 2 * offsets) + k for j in range(offsets)
            for k in range(-radius, radius)]


def reach(v: Variant, x0: Fraction) -> Cycle:
    """The certified cycle that ``v`` reaches from rest at x₀ (units of η)."""
    ef = v.gamma is not None
    return cycle(v.beta, v.tau, ef, v.nesterov, x0, gamma=v.gamma if ef else Fraction(1))


@dataclass(frozen=True)
class Shape:
    """The cycles of one sign pattern (up to rotation), over all offsets where they occur."""

    period: int
    share: float                      # fraction of the starts that end on this shape
    half_p2p: tuple                   # (min, max) over its cycles, units of η
    amplitude: tuple                  # (min, max) of max|x*| over its cycles


@dataclass(frozen=True)
class AttractorSet:
    """The certified cycles reached from every start of the start grid (module docstring)."""

    variant: Variant
    offsets: int
    radius: int
    reached: tuple                    # (x0, Cycle) per start
    per_offset: dict = field(default_factory=dict)  # offset -> list of Cycles

    @property
    def cycles(self) -> dict:
        """Distinct cycles (as sets of states) → number of starts that reach each."""
        out: dict = {}
        for _, c in self.reached:
            k = c.key()
            n, _ = out.get(k, (0, c))
            out[k] = (n + 1, c)
        return out

    def _vals(self, attr: str) -> list[Fraction]:
        return [getattr(c, attr) for _, c in self.reached]

    def worst(self, attr: str = "amplitude") -> Fraction:
        """max over the starts of ``attr`` (``amplitude``, ``half_p2p``, ``mean_abs``,
        ``floor``)."""
        return max(self._vals(attr) if attr != "floor" else self._floors())

    def mean(self, attr: str = "amplitude") -> Fraction:
        """The start-averaged ``attr`` (basin-weighted mean over the cycles)."""
        vals = self._vals(attr) if attr != "floor" else self._floors()
        return sum(vals) / len(vals)

    def _floors(self) -> list[Fraction]:
        return [c.mean_sq / 2 for _, c in self.reached]

    def offset_means(self, attr: str = "floor") -> dict:
        """offset → the mean of ``attr`` over the starts with that offset."""
        out = {}
        for o, cs in self.per_offset.items():
            vals = [c.mean_sq / 2 if attr == "floor" else getattr(c, attr) for c in cs]
            out[o] = sum(vals) / len(vals)
        return out

    @property
    def shapes(self) -> list[Shape]:
        """The sign patterns of the set with their basin shares, largest share first."""
        groups: dict = {}
        for _, c in self.reached:
            s = c.signs
            k = min(tuple(s[i:] + s[:i]) for i in range(c.period))
            groups.setdefault(k, []).append(c)
        n = len(self.reached)
        out = [Shape(cs[0].period, len(cs) / n,
                     (min(c.half_p2p for c in cs), max(c.half_p2p for c in cs)),
                     (min(c.amplitude for c in cs), max(c.amplitude for c in cs)))
               for cs in groups.values()]
        return sorted(out, key=lambda s: -s.share)


@cache
def attractor_set(v: Variant, offsets: int = 10, radius: int = 2) -> AttractorSet:
    """Every certified cycle ``v`` reaches from the start grid, J = ``offsets``,
    R = ``radius``."""
    reached = []
    per: dict = {}
    for x0 in starts(offsets, radius):
        c = reach(v, x0)
        reached.append((x0, c))
        per.setdefault(x0 - (x0.numerator // x0.denominator), []).append(c)
    return AttractorSet(v, offsets, radius, tuple(reached), per)


def summary(s: AttractorSet) -> dict:
    """One table row: the set's size and shapes, worst and start-averaged A, H, mean∣x∣,
    floor (floats, units of η and hη²)."""
    return {"beta": float(s.variant.beta), "tau": s.variant.tau,
            "nesterov": s.variant.nesterov,
            "gamma": None if s.variant.gamma is None else float(s.variant.gamma),
            "offsets": s.offsets, "radius": s.radius, "starts": len(s.reached),
            "cycles": len(s.cycles), "shapes": len(s.shapes),
            "periods": sorted({sh.period for sh in s.shapes}),
            "worst_amplitude": float(s.worst("amplitude")),
            "mean_amplitude": float(s.mean("amplitude")),
            "worst_half_p2p": float(s.worst("half_p2p")),
            "mean_half_p2p": float(s.mean("half_p2p")),
            "mean_abs": float(s.mean("mean_abs")),
            "worst_floor": float(s.worst("floor")), "mean_floor": float(s.mean("floor"))}


def ef_share(sync: AttractorSet, plain: AttractorSet, ef: AttractorSet) -> dict:
    r"""EF's share of the delay gap in loss floor,
    :math:`(F_\mathrm{async} - F_\mathrm{EF})/(F_\mathrm{async} - F_\mathrm{sync})`, from the
    start-averaged floors, and its range over the offsets (per-offset averages)."""
    def share(fs, fa, fe):
        return (fa - fe) / (fa - fs)
    avg = share(sync.mean("floor"), plain.mean("floor"), ef.mean("floor"))
    ms, ma, me = (x.offset_means("floor") for x in (sync, plain, ef))
    per = {o: share(ms[o], ma[o], me[o]) for o in ma if ma[o] != ms[o]}
    return {"share": float(avg), "min": float(min(per.values())),
            "max": float(max(per.values())), "per_offset": {float(o): float(v)
                                                           for o, v in per.items()}}


#: the grid of the book's attractor table (:func:`attractor_table`)
TABLE_GRID = {"betas": ("0", "1/2", "4/5", "9/10", "19/20"), "taus": (1, 2, 3),
              "offsets": 10, "radius": 2}


def attractor_table(grid: dict | None = None, sgd_gamma_rows: bool = True) -> list[dict]:
    """:func:`summary` of every attractor set of ``grid`` (default :data:`TABLE_GRID`): per
    (τ, β, heavy ball / Nesterov) no EF, EF and (``sgd_gamma_rows``) EF(γ*) with T3's γ*; the
    no-EF rows also carry the harmonic-balance amplitude ``hb``."""
    from .muon_cycle import harmonic_balance_amplitude

    g = TABLE_GRID if grid is None else grid
    rows = []
    for t in g["taus"]:
        for b in g["betas"]:
            for n in (False, True):
                gams = [None, Fraction(1)] + ([sgd_gamma(b, t)] if sgd_gamma_rows and
                                              Fraction(b) > 0 else [])
                for gam in gams:
                    r = summary(attractor_set(variant(b, t, n, gam), g["offsets"], g["radius"]))
                    r["ef"] = "none" if gam is None else ("EF" if gam == 1 else "EF(gamma*)")
                    r["hb"] = harmonic_balance_amplitude(float(Fraction(b)), t, n) \
                        if gam is None else None
                    rows.append(r)
    return rows


def momentum_shrinks(rows: list[dict], key: str = "mean_half_p2p") -> list[dict]:
    """The rows of :func:`attractor_table` where a larger β gives a strictly smaller ``key``
    than the next smaller β at the same (τ, momentum, EF)."""
    groups: dict = {}
    for r in rows:
        if r["ef"] != "EF(gamma*)":
            groups.setdefault((r["tau"], r["nesterov"], r["ef"]), []).append(r)
    out = []
    for rs in groups.values():
        rs = sorted(rs, key=lambda r: r["beta"])
        out += [{"tau": c["tau"], "nesterov": c["nesterov"], "ef": c["ef"], "beta_from": a["beta"],
                 "beta_to": c["beta"], "from": a[key], "to": c[key]}
                for a, c in zip(rs, rs[1:]) if c[key] < a[key]]
    return out


def sgd_gamma(beta, tau: int) -> Fraction:
    """T3's γ*(β, τ) for SGD momentum (:func:`theory.stability.optimal_gamma`) as a rational
    with denominator ≤ 1000 (the exact map needs a rational γ; ∣Δγ∣ < 10⁻⁶)."""
    from .stability import optimal_gamma
    return Fraction(optimal_gamma(float(Fraction(str(beta))), tau)[0]).limit_denominator(1000)


def gamma_scan(beta, tau: int, nesterov: bool, gammas=None, offsets: int = 10,
               radius: int = 1) -> dict:
    r"""Muon's start-averaged delayed floor F/(hη²) as a function of EF(γ)'s γ, with T3's γ*
    beside it: ``{"floors": {γ: F}, "best": γ with the least F, "sgd_gamma": γ*,
    "at_sgd_gamma": F(γ*), "at_one": F(1), "plain": F without EF}``. Default γ grid
    {0, ¼, …, 3} ∪ {γ*}; a γ whose starts do not all certify within the step budget is
    recorded as ``None`` (and never chosen as best)."""
    gs = [Fraction(k, 4) for k in range(13)] if gammas is None else \
        [Fraction(str(g)) if not isinstance(g, Fraction) else g for g in gammas]
    gstar = sgd_gamma(beta, tau)
    floors: dict = {}
    for g in sorted(set(gs) | {gstar, Fraction(1)}):
        try:
            floors[g] = attractor_set(variant(beta, tau, nesterov, g), offsets, radius).mean(
                "floor")
        except RuntimeError:
            floors[g] = None
    ok = {g: f for g, f in floors.items() if f is not None}
    best = min(ok, key=lambda g: ok[g])
    plain = attractor_set(variant(beta, tau, nesterov), offsets, radius).mean("floor")
    return {"floors": floors, "best": best, "sgd_gamma": gstar, "at_sgd_gamma": floors[gstar],
            "at_one": floors[Fraction(1)], "at_best": ok[best], "plain": plain}


#: the grid ``python -m theory`` verifies (small, so the run stays in seconds): J = 6, R = 1
CHECK_GRID = {"betas": (Fraction(0), Fraction(1, 2), Fraction(9, 10)), "taus": (1, 2),
              "offsets": 6, "radius": 1}


def numeric_checks(grid: dict | None = None) -> list[tuple[str, bool, str]]:
    """Exact checks over the attractor sets of ``grid`` (default :data:`CHECK_GRID`), for
    ``python -m theory``: each claim of the module docstring, checked on every set."""
    g = CHECK_GRID if grid is None else grid
    J, R = g["offsets"], g["radius"]
    sets = {(b, t, n, e): attractor_set(variant(b, t, n, Fraction(1) if e else None), J, R)
            for b in g["betas"] for t in g["taus"] for n in (False, True) for e in (False, True)}
    out = []
    n_cyc = sum(len(s.cycles) for s in sets.values())
    n_start = sum(len(s.reached) for s in sets.values())
    several = [k for k, s in sets.items() if len(s.shapes) > 1]
    ok1 = all(len(s.reached) == 2 * J * R and all(c.margin > 0 for _, c in s.reached)
              for s in sets.values())
    out.append(("MA1 every start reaches a certified cycle", ok1,
                f"{n_start} starts, {n_cyc} distinct cycles in {len(sets)} sets; "
                f"{len(several)} sets have more than one sign pattern"))
    # MA2: beta = 0 is T1's orbit: half peak-to-peak tau + 1/2 for every start, max|x| not
    bad, amp = [], []
    for (b, t, _n, e), s in sets.items():
        if b == 0 and not e:
            bad += [x0 for x0, c in s.reached
                    if c.half_p2p != Fraction(2 * t + 1, 2) or c.period != 2 * (2 * t + 1)]
            amp.append((t, float(min(s._vals("amplitude"))), float(s.worst("amplitude"))))
    out.append(("MA2 beta = 0: H = tau + 1/2, period 2(2 tau + 1) from every start", not bad,
                "max|x| ranges " + ", ".join(f"tau={t}: [{lo:.3g}, {hi:.3g}]"
                                             for t, lo, hi in sorted(set(amp)))))
    # MA3: with or without EF, a larger beta never gives a smaller worst or start-averaged H
    dec = []
    for t in g["taus"]:
        for n in (False, True):
            for e in (False, True):
                for stat in ("worst", "mean"):
                    vals = [getattr(sets[(b, t, n, e)], stat)("half_p2p") for b in g["betas"]]
                    dec += [(t, n, e, stat) for a, c in zip(vals, vals[1:]) if c < a]
    out.append(("MA3 worst and start-averaged H non-decreasing in beta (EF off and on)", not dec,
                f"betas {[float(b) for b in g['betas']]}; violations {dec}"))
    # MA3b: with EF, max|x| and the floor can fall as beta grows while H stays
    lo, hi = g["betas"][0], g["betas"][1]
    a0, a1 = sets[(lo, 1, True, True)], sets[(hi, 1, True, True)]
    ok3b = (a1.mean("amplitude") < a0.mean("amplitude") and a1.mean("floor") < a0.mean("floor")
            and a1.mean("half_p2p") == a0.mean("half_p2p"))
    out.append((f"MA3b EF + Nesterov, tau = 1, beta {float(lo):g} -> {float(hi):g}: start-averaged "
                "max|x| and floor fall, H equal", ok3b,
                f"max|x| {float(a0.mean('amplitude')):.3g} -> {float(a1.mean('amplitude')):.3g}, "
                f"floor {float(a0.mean('floor')):.3g} -> {float(a1.mean('floor')):.3g}, "
                f"H {float(a0.mean('half_p2p')):.3g}"))
    # MA4: EF's effect on the start-averaged H and floor changes sign with beta
    hurts, helps = [], []
    for (b, t, n, e), s in sets.items():
        if e:
            continue
        f = sets[(b, t, n, True)]
        d_h, d_f = f.mean("half_p2p") - s.mean("half_p2p"), f.mean("floor") - s.mean("floor")
        (hurts if b <= Fraction(1, 2) else helps).append((float(b), t, n, d_h, d_f))
    ok4 = all(dh >= 0 and df > 0 for *_, dh, df in hurts) and \
        all(dh < 0 and df < 0 for *_, dh, df in helps)
    out.append(("MA4 EF raises the start-averaged floor (H not smaller) for beta <= 1/2 and "
                "lowers both for beta = 9/10", ok4,
                f"{len(hurts)} + {len(helps)} (beta, tau, momentum) sets"))
    # MA5: harmonic balance: at most the worst H (equal at beta = 0); below the start-averaged
    # H at large beta (it underestimates the cycle)
    from .muon_cycle import harmonic_balance_amplitude
    worst5, bad5 = (0.0, None), []
    for (b, t, n, e), s in sets.items():
        if e:
            continue
        hb = harmonic_balance_amplitude(float(b), t, n)
        mh, wh = float(s.mean("half_p2p")), float(s.worst("half_p2p"))
        if (b == 0 and abs(hb - wh) > 1e-9) or hb > wh + 1e-9 or \
                (b >= Fraction(9, 10) and hb >= mh):
            bad5.append((float(b), t, n))
        if mh - hb > worst5[0]:
            worst5 = (mh - hb, (float(b), t, "Nesterov" if n else "heavy ball", round(hb, 3),
                                round(mh, 3)))
    out.append(("MA5 harmonic balance pi/(2 omega*) <= worst H (= at beta = 0), < start-"
                "averaged H at beta = 9/10", not bad5,
                f"largest shortfall {worst5[0]:.3g} eta at {worst5[1]}; violations {bad5}"))
    return out


__all__ = ["Variant", "variant", "starts", "reach", "Shape", "AttractorSet", "attractor_set",
           "summary", "ef_share", "sgd_gamma", "gamma_scan", "CHECK_GRID", "TABLE_GRID",
           "attractor_table", "momentum_shrinks", "numeric_checks"]
