r"""The Nesterov delay correction (PipeNAG-style delay-aware look-ahead).

Source: Ajanthan, Ramasinghe, Zuo, Avraham, Long, "Nesterov Method for Asynchronous Pipeline
Parallel Optimization", ICML 2025 (arXiv:2505.01099), abstract and §3: NAG evaluates the
gradient at a *look-ahead* point, and the paper modifies that look-ahead so that it accounts
for the staleness of the gradient. The authors' code (PluralisResearch/AsyncPP,
``main_with_runtime.py`` + ``optim/nadamw.py``) realises it as PipeDream weight stashing with
``torch.optim.NAdam`` (decoupled weight decay, β₁ = 0.99, ``--adaptive_momentum`` raising β₁
with the stage's delay): a base optimizer whose update already contains a Nesterov look-ahead.
The rule below is our reading of "the gradient is taken where the weights will be when the
stale gradient is applied", stated so that it is exact and testable.

**The rule.** Let :math:`x_t` be the plain delayed sequence,
:math:`x_{t+1} = x_t - u(t)` with :math:`u(t) = U(g;\,\cdot)` the wrapped optimizer's update
on the gradient that arrives at step t (computed τ steps earlier). The gradient is evaluated
at the look-ahead point

.. math::
    \theta_t = x_t + c\,(x_t - x_{t-1}),\qquad
    c = c_\tau(\beta) = \sum_{k=1}^{\tau+1}\beta^k = \beta\,\frac{1-\beta^{\tau+1}}{1-\beta},

the point where momentum alone carries the weights by the time the gradient taken now enters
an update (τ steps of delay, plus NAG's own one-step look-ahead). For τ = 0 and heavy-ball
momentum β this is NAG exactly: :math:`\theta_t = x_t + \beta(x_t-x_{t-1})` (Sutskever et al.
2013; ``torch.optim.SGD(nesterov=True)``, tested). The stored parameters *are* θ (the
forward/backward of every stage runs on them, in the simulation and in the executor), so the
recursion actually applied is, with :math:`u(-1) = 0`,

.. math::
    \theta_{t+1} = \theta_t - (1+c)\,u(t) + c\,u(t-1),

which is the EF(γ) recursion with γ = c (``asyncpp.delay.ef_gamma``): in update space the
delay-aware Nesterov look-ahead *is* an extrapolation of the last update by c steps. This
module computes c per parameter group; :class:`~asyncpp.delay.DelayedOptimizer` applies the
recursion with the same fused ops as EF, so the two corrections share one tested code path.
For PipeDream, group s has :math:`\tau_s = P-1-s` and gets :math:`c_{\tau_s}(\beta)`.

β is the momentum of the wrapped optimizer (``"auto"``: SGD/Muon ``momentum``, or β₁ of
the Adam family, read per group as for ``ef_gamma="auto"``) or a number in [0, 1).
One parameter-sized buffer (:math:`u(t-1)`), as EF.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .ef_gamma import AUTO, group_beta


def lookahead_coefficient(beta: float, tau: int) -> float:
    r""":math:`c_\tau(\beta) = \sum_{k=1}^{\tau+1}\beta^k` for τ ≥ 1, and 0 for τ = 0 (a
    synchronous group is never corrected: the wrapped optimizer carries its own look-ahead,
    if any)."""
    if isinstance(tau, bool) or not isinstance(tau, int) or tau < 0:
        raise ValueError(f"tau must be an integer delay >= 0, got {tau!r}")
    b = float(beta)
    if not (math.isfinite(b) and 0.0 <= b < 1.0):
        raise ValueError(f"nesterov_beta must lie in [0, 1), got {beta!r}")
    if tau == 0:
        return 0.0
    # the sum, term by term: exact for β = 0 and free of the 0/0 of the closed form at β → 1
    return float(sum(b ** k for k in range(1, tau + 2)))


def resolve_nesterov(nesterov_beta, groups: Sequence[dict],
                     delays: Sequence[int]) -> tuple[float, ...]:
    r"""One look-ahead coefficient c per parameter group, from ``nesterov_beta``: ``"auto"``
    (:math:`\beta_g` read from the group, :func:`~asyncpp.delay.group_beta`), one number in
    [0, 1), or one number per group. One ``ValueError`` naming the bad value otherwise."""
    n = len(groups)
    if isinstance(nesterov_beta, str):
        if nesterov_beta.strip().lower() != AUTO:
            raise ValueError(f"nesterov_beta must be a number in [0, 1), one per parameter "
                             f"group, or 'auto'; got {nesterov_beta!r}")
        betas = []
        for g, group in enumerate(groups):
            try:
                betas.append(group_beta(group)[0])
            except ValueError as e:
                raise ValueError(str(e).replace("ef_gamma='auto'", "nesterov_beta='auto'")) \
                    from None
            if not 0.0 <= betas[-1] < 1.0:
                raise ValueError(f"nesterov_beta='auto' needs a momentum in [0, 1); parameter "
                                 f"group {g} has {betas[-1]!r}; pass nesterov_beta explicitly")
    elif isinstance(nesterov_beta, Sequence):
        betas = list(nesterov_beta)
        if len(betas) != n:
            raise ValueError(f"got {len(betas)} per-group nesterov_beta values for {n} "
                             "parameter groups; pass one per group, a single number, or 'auto'")
    else:
        betas = [nesterov_beta] * n
    out = []
    for b, tau in zip(betas, delays):
        if isinstance(b, bool) or not isinstance(b, (int, float)):
            raise ValueError(f"nesterov_beta must be a number in [0, 1), got {b!r}")
        out.append(lookahead_coefficient(float(b), int(tau)))
    return tuple(out)


__all__ = ["lookahead_coefficient", "resolve_nesterov"]
