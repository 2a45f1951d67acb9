r"""The statistics of a study's verdicts, one function per test.

Runs are paired by seed (seed k of two cells shares the initialisation and the data order), so
every comparison is made on the seeds **both** sides have, :math:`K = K_a \cap K_b`, never on
means over different seed sets. :math:`t_{q,\nu}` is Student's t quantile with :math:`\nu`
degrees of freedom; :math:`\alpha` is the test's level (0.05 unless stated).

- :func:`paired_t` — :math:`d_k = a_k - b_k`; :math:`\bar d \pm t_{1-\alpha/2,\,n-1}\,s_d/\sqrt n`
  and the two-sided p-value of :math:`\bar d = 0`.
- :func:`tost` — equivalence within :math:`\pm m`: two one-sided tests,
  :math:`p = \max(p_-, p_+)` with :math:`p_\pm` the one-sided p-values of
  :math:`\bar d \le -m` and :math:`\bar d \ge m`; equivalent iff :math:`p < \alpha`, i.e. iff
  the :math:`1-2\alpha` interval lies inside :math:`(-m, m)`.
- :func:`welch_tost` — the same for two unpaired samples (different models share no seed
  noise): :math:`\bar a - \bar b` with :math:`se^2 = s_a^2/n_a + s_b^2/n_b` and Welch's
  :math:`\nu = se^4 / (\frac{(s_a^2/n_a)^2}{n_a - 1} + \frac{(s_b^2/n_b)^2}{n_b - 1})`.
- :func:`at_most`, :func:`welch_at_most` — "the difference is below +m" (non-inferiority,
  the upper of TOST's two one-sided tests): :math:`p = P(T_\nu \le (\bar d - m)/se)`;
  established iff :math:`p < \alpha`, i.e. iff the upper end of the :math:`1-2\alpha`
  interval lies below m.
- :func:`holm` — Holm's step-down adjustment over the declared primary endpoints:
  :math:`\tilde p_{(i)} = \max_{j \le i} \min\{1, (M - j + 1)\,p_{(j)}\}`.
- :func:`fieller_share` — the share of a gap a correction recovers,
  :math:`\rho = \bar x / \bar y` with :math:`x_k = \text{none}_k - \text{corr}_k`,
  :math:`y_k = \text{none}_k - \text{sync}_k`, and Fieller's interval: the :math:`\rho` with
  :math:`(\bar x - \rho \bar y)^2 \le t^2 (v_{xx} - 2\rho v_{xy} + \rho^2 v_{yy})`
  (:math:`v` the covariances of the means, :math:`t = t_{1-\alpha/2,\,n-1}`).
- :func:`fieller_ratio` — the same for any two paired per-seed quantities, :math:`\bar x/\bar y`
  (e.g. EF(γ*)'s share minus EF's on one gap: :math:`x_k = \text{EF}_k - \text{EF}(γ^*)_k`).
- :func:`share_difference` — one ratio-of-means share minus another over the same seeds
  (two gaps, e.g. two training lengths), the delta method's interval.
- :func:`share_at_least` — the test of "share ≥ s" without a ratio:
  :math:`z_k = (\text{none}_k - \text{corr}_k) - s\,(\text{none}_k - \text{sync}_k)`, its
  t-interval and the two-sided p-value of :math:`\bar z = 0` (established: interval above 0).
- :func:`gap_slope` — least squares :math:`g_i = \beta_0 + \beta_1 x_i` over every (length,
  seed) gap pooled (e.g. :math:`x = \log_2` tokens), :math:`\hat\beta_1 \pm
  t_{1-\alpha/2,\,n-2}\,\hat\sigma/\sqrt{\sum (x_i - \bar x)^2}`.
- :func:`per_seed_slope` — the slope fitted per seed (:math:`b_k`, its own lengths), then the
  one-sample t over seeds: :math:`\bar b \pm t_{1-\alpha/2,\,n-1}\,s_b/\sqrt n`.
- :func:`select_lr` — the learning rate of a cell from its selection seeds only (≥ 2 of them,
  common to every grid point): the argmin of the mean over seeds, or the vertex of the least
  squares parabola of the mean in :math:`\log lr`.

Nothing here reads files: callers pass ``{seed: value}`` mappings.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats as _st

ALPHA = 0.05


class TooFewSeeds(ValueError):
    """A test needs more seeds common to both sides than it was given."""


@dataclasses.dataclass(frozen=True)
class Interval:
    """An estimate, its two-sided interval (``lo``/``hi``; ±inf when unbounded) and p-value."""

    estimate: float
    lo: float
    hi: float
    p: float
    n: int
    seeds: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def common(*sides: Mapping[int, float]) -> tuple[int, ...]:
    """The seeds every side has, sorted."""
    keys = set(sides[0])
    for s in sides[1:]:
        keys &= set(s)
    return tuple(sorted(keys))


def _diffs(a: Mapping[int, float], b: Mapping[int, float], need: int = 2):
    seeds = common(a, b)
    if len(seeds) < need:
        raise TooFewSeeds(f"needs at least {need} seeds common to both sides, has "
                          f"{len(seeds)} ({list(seeds)})")
    return seeds, [a[k] - b[k] for k in seeds]


def _mean_sd(x: Sequence[float]) -> tuple[float, float]:
    n = len(x)
    m = math.fsum(x) / n
    return m, math.sqrt(math.fsum((v - m) ** 2 for v in x) / (n - 1))


def _t_interval(z: Sequence[float], alpha: float) -> tuple[float, float, float, float, float]:
    """(mean, lo, hi, standard error, t statistic) of a one-sample t on ``z``."""
    n = len(z)
    m, sd = _mean_sd(z)
    se = sd / math.sqrt(n)
    q = _st.t.ppf(1 - alpha / 2, n - 1)
    t = m / se if se > 0 else math.copysign(math.inf, m) if m else 0.0
    return m, float(m - q * se), float(m + q * se), se, t


def paired_t(a: Mapping[int, float], b: Mapping[int, float], alpha: float = ALPHA) -> Interval:
    """Paired difference a − b on the common seeds: mean, 1 − α t-interval, two-sided p."""
    seeds, d = _diffs(a, b)
    m, lo, hi, se, t = _t_interval(d, alpha)
    p = 2 * _st.t.sf(abs(t), len(d) - 1) if se > 0 else (0.0 if m else 1.0)
    return Interval(m, lo, hi, float(p), len(d), seeds)


def tost(a: Mapping[int, float], b: Mapping[int, float], margin: float,
         alpha: float = ALPHA) -> Interval:
    """Equivalence of a and b within ±``margin`` (two one-sided t-tests on the common seeds).

    The interval returned is the 1 − 2α one, the one whose inclusion in (−margin, margin)
    is the test; ``p`` is max of the two one-sided p-values."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be positive, got {margin}")
    seeds, d = _diffs(a, b)
    n = len(d)
    m, lo, hi, se, _ = _t_interval(d, 2 * alpha)
    if se == 0:
        p = 0.0 if abs(m) < margin else 1.0
    else:
        p_low = _st.t.sf((m + margin) / se, n - 1)  # H0: mean <= -margin
        p_high = _st.t.cdf((m - margin) / se, n - 1)  # H0: mean >= +margin
        p = float(max(p_low, p_high))
    return Interval(m, lo, hi, p, n, seeds)


def beyond_margin(a: Mapping[int, float], b: Mapping[int, float], margin: float,
                  alpha: float = ALPHA) -> Interval:
    """The reverse reading of an equivalence that failed: does a − b lie *beyond* ±``margin``
    on the side its mean falls (paired, common seeds)?

    With :math:`\\bar d \\ge 0` the test is H0: μ ≤ +m against H1: μ > +m (mirrored below 0);
    the side is chosen by the data, so ``p`` is twice the one-sided p (capped at 1) and the
    interval is the two-sided 1 − α one: p < α exactly when that interval lies wholly beyond
    the margin on its side. Exploratory by construction — not a pre-registered test."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be positive, got {margin}")
    seeds, d = _diffs(a, b)
    n = len(d)
    m, lo, hi, se, _ = _t_interval(d, alpha)
    if se == 0:
        p = 0.0 if abs(m) > margin else 1.0
    else:
        p = float(min(1.0, 2 * _st.t.sf((abs(m) - margin) / se, n - 1)))
    return Interval(m, lo, hi, p, n, seeds)


def _welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(mean difference, standard error, Welch's degrees of freedom) of a − b."""
    if len(a) < 2 or len(b) < 2:
        raise TooFewSeeds(f"an unpaired comparison needs at least 2 values a side, has "
                          f"{len(a)} and {len(b)}")
    (ma, sa), (mb, sb) = _mean_sd(a), _mean_sd(b)
    va, vb = sa * sa / len(a), sb * sb / len(b)
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1)) if se > 0 else 1.0
    return ma - mb, se, dof


def _one_sided_below(m: float, se: float, dof: float, margin: float) -> float:
    """p of H0: mean ≥ margin against H1: mean < margin."""
    if se == 0:
        return 0.0 if m < margin else 1.0
    return float(_st.t.cdf((m - margin) / se, dof))


def _equivalence(m: float, se: float, dof: float, margin: float, alpha: float, n: int,
                 seeds: tuple[int, ...] = (), upper_only: bool = False) -> Interval:
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be positive, got {margin}")
    q = float(_st.t.ppf(1 - alpha, dof))
    p = _one_sided_below(m, se, dof, margin)
    if not upper_only:
        p = max(p, _one_sided_below(-m, se, dof, margin))  # H0: mean <= -margin
    return Interval(m, m - q * se, m + q * se, p, n, seeds)


def at_most(a: Mapping[int, float], b: Mapping[int, float], margin: float,
            alpha: float = ALPHA) -> Interval:
    """"a − b lies below +``margin``" on the common seeds (paired): the upper one-sided test
    of TOST. The interval is the 1 − 2α one; ``p`` the one-sided p-value."""
    seeds, d = _diffs(a, b)
    m, _, _, se, _ = _t_interval(d, 2 * alpha)
    return _equivalence(m, se, len(d) - 1, margin, alpha, len(d), seeds, upper_only=True)


def welch_tost(a: Sequence[float], b: Sequence[float], margin: float,
               alpha: float = ALPHA) -> Interval:
    """Equivalence of two unpaired samples within ±``margin`` (TOST with Welch's t); the
    interval is the 1 − 2α one, ``p`` the larger one-sided p, ``n`` the smaller sample."""
    m, se, dof = _welch(a, b)
    return _equivalence(m, se, dof, margin, alpha, min(len(a), len(b)))


def welch_at_most(a: Sequence[float], b: Sequence[float], margin: float,
                  alpha: float = ALPHA) -> Interval:
    """"mean(a) − mean(b) lies below +``margin``" for unpaired samples (Welch): the upper
    one-sided test of TOST; the interval is the 1 − 2α one."""
    m, se, dof = _welch(a, b)
    return _equivalence(m, se, dof, margin, alpha, min(len(a), len(b)), upper_only=True)


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm-adjusted p-values of a family (reject at α where the adjusted p < α)."""
    order = sorted(pvalues, key=lambda k: (pvalues[k], k))
    m = len(order)
    out, running = {}, 0.0
    for j, k in enumerate(order):
        running = max(running, min(1.0, (m - j) * pvalues[k]))
        out[k] = running
    return out


def fieller_ratio(x: Mapping[int, float], y: Mapping[int, float],
                  alpha: float = ALPHA) -> Interval:
    r""":math:`\bar x / \bar y` over the seeds both have, with Fieller's 1 − α interval.

    The interval is unbounded (±inf) when :math:`\bar y` is not distinguishable from zero
    (:math:`\bar y^2 \le t^2 v_{yy}`): no finite set of ratios is then supported. ``p`` is
    the two-sided p-value of ratio = 0 (the paired t on x)."""
    seeds = common(x, y)
    n = len(seeds)
    if n < 2:
        raise TooFewSeeds(f"a ratio of means needs at least 2 seeds, has {n}")
    xs = [x[k] for k in seeds]
    ys = [y[k] for k in seeds]
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    vxx = math.fsum((v - mx) ** 2 for v in xs) / (n - 1) / n
    vyy = math.fsum((v - my) ** 2 for v in ys) / (n - 1) / n
    vxy = math.fsum((u - mx) * (v - my) for u, v in zip(xs, ys)) / (n - 1) / n
    t2 = float(_st.t.ppf(1 - alpha / 2, n - 1)) ** 2
    qa = my * my - t2 * vyy
    qb = -2 * (mx * my - t2 * vxy)
    qc = mx * mx - t2 * vxx
    est = mx / my if my else math.nan
    disc = qb * qb - 4 * qa * qc
    # b² − 4ac cancels: with no spread in x and y it is 0 up to rounding of b², and a
    # rounding-sized positive rest would open the point x̄/ȳ into a spurious interval
    rounding = 8 * np.finfo(np.float64).eps * qb * qb
    if qa > 0 and disc >= -rounding:
        r = math.sqrt(disc) if disc > rounding else 0.0
        lo, hi = float((-qb - r) / (2 * qa)), float((-qb + r) / (2 * qa))
    else:
        lo, hi = -math.inf, math.inf
    tx = mx / math.sqrt(vxx) if vxx > 0 else math.inf
    p = float(2 * _st.t.sf(abs(tx), n - 1))
    return Interval(est, lo, hi, p, n, seeds)


def fieller_share(none: Mapping[int, float], corr: Mapping[int, float],
                  sync: Mapping[int, float], alpha: float = ALPHA) -> Interval:
    r"""Share of the none − sync gap that corr recovers, with Fieller's 1 − α interval:
    :func:`fieller_ratio` of :math:`x_k = \text{none}_k - \text{corr}_k` over
    :math:`y_k = \text{none}_k - \text{sync}_k` on the seeds all three cells have."""
    seeds = common(none, corr, sync)
    if len(seeds) < 2:
        raise TooFewSeeds(f"a share needs at least 2 seeds common to all three cells, "
                          f"has {len(seeds)}")
    return fieller_ratio({k: none[k] - corr[k] for k in seeds},
                         {k: none[k] - sync[k] for k in seeds}, alpha)


def share_difference(first: tuple[Mapping[int, float], Mapping[int, float],
                                  Mapping[int, float]],
                     second: tuple[Mapping[int, float], Mapping[int, float],
                                   Mapping[int, float]],
                     alpha: float = ALPHA) -> Interval:
    r"""The share of one gap minus the share of another, each a ratio of means, paired by seed.

    ``first`` and ``second`` are (none, corr, sync); on the seeds all six cells have,
    :math:`d = \bar x_1/\bar y_1 - \bar x_2/\bar y_2` (x, y as in :func:`fieller_share`).
    Its interval is the delta method's, :math:`d \pm t_{1-\alpha/2,\,n-1}\sqrt{g^\top V g}`
    with :math:`g = (1/\bar y_1, -\bar x_1/\bar y_1^2, -1/\bar y_2, \bar x_2/\bar y_2^2)`
    and V the covariance of the four means; it is honest only where both gaps are clear of
    zero (callers check that first: a share of a gap within noise is a ratio of noise)."""
    seeds = common(*first, *second)
    n = len(seeds)
    if n < 2:
        raise TooFewSeeds(f"a share difference needs at least 2 seeds common to all six "
                          f"cells, has {n}")
    (n1, c1, s1), (n2, c2, s2) = first, second
    rows = np.array([[n1[k] - c1[k], n1[k] - s1[k], n2[k] - c2[k], n2[k] - s2[k]]
                     for k in seeds], dtype=np.float64)
    m = rows.mean(axis=0)
    x1, y1, x2, y2 = (float(v) for v in m)
    if y1 == 0 or y2 == 0:
        return Interval(math.nan, -math.inf, math.inf, 1.0, n, seeds)
    g = np.array([1 / y1, -x1 / y1 ** 2, -1 / y2, x2 / y2 ** 2])
    V = np.cov(rows, rowvar=False, ddof=1) / n
    se = math.sqrt(max(float(g @ V @ g), 0.0))
    d = x1 / y1 - x2 / y2
    t = float(_st.t.ppf(1 - alpha / 2, n - 1))
    p = float(2 * _st.t.sf(abs(d) / se, n - 1)) if se > 0 else (0.0 if d else 1.0)
    return Interval(d, d - t * se, d + t * se, p, n, seeds)


def share_at_least(none: Mapping[int, float], corr: Mapping[int, float],
                   sync: Mapping[int, float], s: float, alpha: float = ALPHA) -> Interval:
    """Test of share ≥ s on z = (none − corr) − s·(none − sync) over the common seeds.

    Returns mean z, its two-sided 1 − α t-interval and the two-sided p-value of
    :math:`\\bar z = 0`: share ≥ s is established where :math:`\\bar z > 0` and p < α, i.e.
    where the interval lies above zero."""
    seeds = common(none, corr, sync)
    if len(seeds) < 2:
        raise TooFewSeeds(f"a share test needs at least 2 seeds common to all three cells, "
                          f"has {len(seeds)}")
    z = [(none[k] - corr[k]) - s * (none[k] - sync[k]) for k in seeds]
    m, lo, hi, se, t = _t_interval(z, alpha)
    p = float(2 * _st.t.sf(abs(t), len(z) - 1)) if se > 0 else (0.0 if m else 1.0)
    return Interval(m, lo, hi, p, len(z), seeds)


def gap_slope(points: Sequence[tuple[float, float]], alpha: float = ALPHA) -> Interval:
    """Least-squares slope of gap against x over every pooled point ``(x, gap)``.

    ``p`` is the two-sided p-value of slope = 0 (t with n − 2 degrees of freedom)."""
    n = len(points)
    xs = [p[0] for p in points]
    if n < 3 or len(set(xs)) < 2:
        raise TooFewSeeds(f"a slope needs at least 3 points at 2 or more x values, has {n} at "
                          f"{len(set(xs))}")
    mx = math.fsum(xs) / n
    my = math.fsum(p[1] for p in points) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    b1 = math.fsum((x - mx) * (g - my) for x, g in points) / sxx
    b0 = my - b1 * mx
    rss = math.fsum((g - b0 - b1 * x) ** 2 for x, g in points)
    se = math.sqrt(rss / (n - 2) / sxx)
    q = _st.t.ppf(1 - alpha / 2, n - 2)
    p = float(2 * _st.t.sf(abs(b1 / se), n - 2)) if se > 0 else (0.0 if b1 else 1.0)
    return Interval(b1, float(b1 - q * se), float(b1 + q * se), p, n)


def per_seed_slope(points: Mapping[int, Sequence[tuple[float, float]]],
                   alpha: float = ALPHA) -> Interval:
    """The slope of the gap against x fitted per seed, then a one-sample t over seeds.

    For seed k, :math:`b_k` is the least-squares slope of its own points
    :math:`(x, g_k(x))` (:func:`gap_slope`'s estimate; a seed needs 3 or more points); then
    :math:`\\bar b \\pm t_{1-\\alpha/2,\\,n-1}\\, s_b/\\sqrt n` over the n seeds, and the
    two-sided p of :math:`\\bar b = 0`. Pooling every point instead (:func:`gap_slope`) treats
    the gaps of one seed as independent; this test counts seeds, the unit that varies."""
    slopes = {k: gap_slope(p).estimate for k, p in sorted(points.items()) if len(p) >= 3}
    if len(slopes) < 2:
        raise TooFewSeeds(f"a per-seed slope needs at least 2 seeds with 3 or more lengths, "
                          f"has {len(slopes)}")
    return paired_t(slopes, dict.fromkeys(slopes, 0.0), alpha)


@dataclasses.dataclass(frozen=True)
class LrChoice:
    """The chosen learning rate, the rule that chose it and the mean loss at each grid lr."""

    lr: float
    rule: str
    seeds: tuple[int, ...]
    means: dict[float, float]
    note: str = ""


def select_lr(scores: Mapping[float, Mapping[int, float]], rule: str = "mean",
              min_seeds: int = 2) -> LrChoice:
    """The learning rate chosen from ``{lr: {seed: loss}}`` on the seeds every lr has.

    ``rule = "mean"``: :math:`\\arg\\min_{lr} \\frac1n \\sum_k L_k(lr)`. ``rule = "fit"``:
    the vertex :math:`\\exp(-c_1 / 2c_2)` of :math:`\\bar L \\approx c_0 + c_1 u + c_2 u^2`,
    :math:`u = \\log lr`, fitted by least squares (≥ 3 grid points); where the parabola is not
    convex or its vertex lies outside the grid, the grid's argmin, and ``note`` says why."""
    if rule not in ("mean", "fit"):
        raise ValueError(f"lr rule must be 'mean' or 'fit', got {rule!r}")
    if len(scores) < 2:
        raise ValueError(f"an lr grid needs at least 2 learning rates, has {len(scores)}")
    seeds = common(*scores.values())
    if len(seeds) < min_seeds:
        raise TooFewSeeds(f"lr selection needs at least {min_seeds} seeds common to every lr, "
                          f"has {len(seeds)} ({list(seeds)})")
    means = {lr: math.fsum(s[k] for k in seeds) / len(seeds) for lr, s in scores.items()}
    best = min(means, key=lambda lr: (means[lr], lr))
    if rule == "mean":
        return LrChoice(best, rule, seeds, means)
    if len(means) < 3:
        raise ValueError("the 'fit' lr rule needs at least 3 learning rates")
    u = np.log(np.array(sorted(means), dtype=np.float64))
    v = np.array([means[lr] for lr in sorted(means)], dtype=np.float64)
    c2, c1, _ = np.polyfit(u, v, 2)
    if c2 <= 0:
        return LrChoice(best, rule, seeds, means, "parabola not convex: grid argmin")
    vertex = -c1 / (2 * c2)
    if not u[0] <= vertex <= u[-1]:
        return LrChoice(best, rule, seeds, means, "vertex outside the grid: grid argmin")
    return LrChoice(float(math.exp(vertex)), rule, seeds, means)


__all__ = ["ALPHA", "Interval", "LrChoice", "TooFewSeeds", "at_most", "beyond_margin", "common",
           "fieller_ratio", "fieller_share", "gap_slope", "holm", "paired_t", "per_seed_slope",
           "select_lr", "share_at_least", "share_difference",
           "tost", "welch_at_most", "welch_tost"]
