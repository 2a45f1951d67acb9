r"""The power of a study's paired tests and the seeds they need (noncentral t).

A paired test is a one-sample t test of per-seed contrasts :math:`d_k` with mean :math:`\mu` and
sd :math:`\sigma`; over n seeds :math:`T = \bar d / (s_d/\sqrt n)` is noncentral t with
:math:`\nu = n - 1` and noncentrality :math:`\delta = \mu\sqrt n/\sigma`.

- :func:`power_t` — a difference test at level α, one- or two-sided, effect in the tested
  direction: :math:`P(T' > t_{1-\alpha/\text{sides},\,\nu})` (the far tail of a two-sided test
  is left out: below :math:`10^{-3}` for any power worth planning for).
- :func:`power_tost` — TOST within :math:`\pm m` at a true mean of 0. It misses when either
  one-sided test misses, :math:`T'_\pm = (\bar d \pm m)/(s_d/\sqrt n) ` on the wrong side of
  :math:`\pm t_{1-\alpha,\nu}`; each miss has probability :math:`F_{\nu,\delta}(t_{1-\alpha,\nu})`
  with :math:`\delta = m\sqrt n/\sigma`, so the power is at least
  :math:`1 - 2F_{\nu,\delta}(t_{1-\alpha,\nu})` (both miss only where :math:`s_d` is so large
  that :math:`m < t\,s_d/\sqrt n`; the bound is tight wherever the power is high).
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


def power_tost(n: int, margin: float, sd: float, alpha: float) -> float:
    """A lower bound (module docstring) on the power of the paired TOST within ±``margin``
    at a true difference of 0."""
    df, nc = n - 1, margin / sd * math.sqrt(n)
    crit = _st.t.ppf(1 - alpha, df)
    return max(0.0, float(1 - 2 * _st.nct.cdf(crit, df, nc)))


def seeds_for_power(test: str, effect: float, sd: float, alpha: float, power: float,
                    alternative: str = "two-sided", margin: float = 0.0,
                    most: int = 200) -> int | None:
    """The fewest seeds n ≥ 3 at which ``test`` ("equivalence": TOST within ±``margin`` at a
    true gap of 0; otherwise a t test of a true mean ``effect``, ``alternative`` as in the
    study file) reaches ``power`` at level ``alpha``. ``None`` past ``most``, or when
    ``effect`` is 0 or on the side a one-sided test cannot establish."""
    if test != "equivalence" and (effect == 0 or (alternative == "greater" and effect < 0)
                                  or (alternative == "less" and effect > 0)):
        return None
    for n in range(3, most + 1):
        if test == "equivalence":
            p = power_tost(n, margin, sd, alpha)
        else:
            p = power_t(n, effect, sd, alpha, 2 if alternative == "two-sided" else 1)
        if p >= power:
            return n
    return None


__all__ = ["power_t", "power_tost", "seeds_for_power"]
