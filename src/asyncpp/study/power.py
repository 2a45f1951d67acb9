r"""The power of a study's paired tests and the seeds they need (noncentral t).

A paired test is a one-sample t test of per-seed contrasts :math:`d_k` with mean :math:`\mu` and
sd :math:`\sigma`; over n seeds :math:`T = \bar d / (s_d/\sqrt n)` is noncentral t with
:math:`\nu = n - 1` and noncentrality :math:`\delta = \mu\sqrt n/\sigma`.

- :func:`power_t` — a difference test at level α, one- or two-sided, effect in the tested
  direction: :math:`P(T' > t_{1-\alpha/\text{sides},\,\nu})` (the far tail of a two-sided test
  is left out: below :math:`10^{-3}` for any power worth planning for).
- :func:`power_tost` — TOST within :math:`\pm m` at a true mean :math:`\mu` with
  :math:`|\mu| < m`. It misses when either one-sided test misses: :math:`(\bar d + m)/(s_d/\sqrt n)`
  at or below :math:`t_{1-\alpha,\nu}` (noncentrality :math:`\delta_- = (m + \mu)\sqrt n/\sigma`)
  or :math:`(m - \bar d)/(s_d/\sqrt n)` there (:math:`\delta_+ = (m - \mu)\sqrt n/\sigma`), so the
  power is at least
  :math:`1 - F_{\nu,\delta_-}(t_{1-\alpha,\nu}) - F_{\nu,\delta_+}(t_{1-\alpha,\nu})`
  (both miss only where :math:`s_d` is so large that :math:`m < t\,s_d/\sqrt n`; the bound is
  tight wherever the power is high).
- :func:`seeds_for_power` — the fewest seeds (≥ 3) at which the test reaches a power.
"""

from __future__ import annotations

import math

from scipy import stats as _st


def power_t(n: int, effect: float, sd: float, alpha: float, sided: int) -> float:
    """Power of a one-sample t test over n seeds against a true mean ``effect`` in the
    direction tested (``sided`` 1 or 2)."""
    df, nc = n - 1, abs(effect) / sd * math.sqrt(n)
    crit = _st.t.ppf(1 - alpha / sided, df)
    return float(_st.nct.sf(crit, df, nc))


def power_tost(n: int, margin: float, sd: float, alpha: float, true: float = 0.0) -> float:
    """A lower bound (module docstring) on the power of the paired TOST within ±``margin``
    at a true difference ``true`` (0 when |true| ≥ margin: the bound says nothing there)."""
    if abs(true) >= margin:
        return 0.0
    df, crit = n - 1, _st.t.ppf(1 - alpha, n - 1)
    miss = sum(float(_st.nct.cdf(crit, df, (margin + s * true) / sd * math.sqrt(n)))
               for s in (1.0, -1.0))
    return max(0.0, 1 - miss)


def seeds_for_power(test: str, effect: float, sd: float, alpha: float, power: float,
                    alternative: str = "two-sided", margin: float = 0.0,
                    most: int = 200) -> int | None:
    """The fewest seeds n ≥ 3 at which ``test`` reaches ``power`` at level ``alpha`` when the
    contrast's true mean is ``effect`` ("equivalence": TOST within ±``margin``; otherwise a t
    test, ``alternative`` as in the study file). ``None`` past ``most``, or when no count
    can: an equivalence whose ``effect`` lies outside the margin, a difference of 0 or on the
    side a one-sided test cannot establish."""
    if test == "equivalence" and abs(effect) >= margin:
        return None
    if test != "equivalence" and (effect == 0 or (alternative == "greater" and effect < 0)
                                  or (alternative == "less" and effect > 0)):
        return None
    for n in range(3, most + 1):
        if test == "equivalence":
            p = power_tost(n, margin, sd, alpha, effect)
        else:
            p = power_t(n, effect, sd, alpha, 2 if alternative == "two-sided" else 1)
        if p >= power:
            return n
    return None


__all__ = ["power_t", "power_tost", "seeds_for_power"]
