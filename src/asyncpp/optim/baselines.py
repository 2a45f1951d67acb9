r"""Baseline optimizers: SOAP, Adan, Lion (from ``pytorch-optimizer``, checked) and MARS (ours).

Each class was read against its paper; ``tests/test_optim_baselines.py`` checks each against
the equations below on a hand-checked float64 example. Notation: g gradient, η lr, λ weight
decay, t the step (1-based), ``momentum`` is β1 for every optimizer.

**SOAP** — Vyas et al. 2024, "SOAP: Improving and Stabilizing Shampoo using Adam", Algorithm 3;
``pytorch_optimizer.SOAP``. For a matrix parameter with Shampoo factors L, R and their eigenbases
:math:`Q_L, Q_R`:

.. math::
    G' = Q_L^\top G Q_R,\quad M \leftarrow \beta_1 M + (1-\beta_1) G,\quad
    V \leftarrow \beta_2 V + (1-\beta_2)\, G'\odot G',\\
    W \leftarrow W - \eta\,\tfrac{\sqrt{1-\beta_2^k}}{1-\beta_1^k}\,
        Q_L \big(Q_L^\top M Q_R / (\sqrt V + \epsilon)\big) Q_R^\top,\quad
    W \leftarrow (1-\eta\lambda) W,\\
    L \leftarrow \beta_s L + (1-\beta_s) G G^\top,\quad
    R \leftarrow \beta_s R + (1-\beta_s) G^\top G.

The first call only initialises L, R and :math:`Q = \mathrm{eigh}` (k counts the Adam steps
after it); every ``precondition_frequency`` Adam steps Q is refreshed by one power step
:math:`Q \leftarrow \mathrm{QR}(P\,Q)` with columns (and the matching axis of V) sorted by
:math:`\mathrm{diag}(Q^\top P Q)`, descending. 1-D tensors get plain Adam (identity basis).
β_s (``shampoo_beta``) defaults to β2. Deviations found in the package: the QR is computed in
float32 even for float64 parameters (precision only); a parameter whose first gradient arrives
after the group's first step has that gradient counted twice in L, R. Neither matters here.

**Adan** — Xie et al. 2022, "Adan: Adaptive Nesterov Momentum Algorithm", Algorithm 1, written
with β → 1−β (torch convention); ``pytorch_optimizer.Adan``:

.. math::
    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t,\quad
    v_t = \beta_2 v_{t-1} + (1-\beta_2)(g_t - g_{t-1}),\\
    n_t = \beta_3 n_{t-1} + (1-\beta_3)\big[g_t + \beta_2 (g_t - g_{t-1})\big]^2,\\
    x_{t+1} = \frac{1}{1+\eta\lambda}\Big(x_t - \eta\,
        \frac{m_t/(1-\beta_1^t) + \beta_2\, v_t/(1-\beta_2^t)}
             {\sqrt{n_t/(1-\beta_3^t)}+\epsilon}\Big)

(the proximal weight decay of Alg. 1 line 7 is the package's ``weight_decouple=False``, our
default). Deviation from Alg. 1: the package, like the authors' code, starts from zero moments
with Adam-style bias correction and :math:`g_0 := g_1` (first difference 0), instead of Alg. 1's
:math:`m_0 = g_0,\ n_0 = g_0^2`. Side effect found: the package's per-parameter path
(``foreach=False``, or AdaNorm/gradient centralisation) leaves ``p.grad`` negated after the
step; the default foreach path does not touch ``p.grad``.

**Lion** — Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Program 1;
``pytorch_optimizer.Lion``:

.. math::
    c_t = \mathrm{sign}(\beta_1 m_{t-1} + (1-\beta_1) g_t),\quad
    x_t = (1-\eta\lambda)\,x_{t-1} - \eta\, c_t,\quad
    m_t = \beta_2 m_{t-1} + (1-\beta_2) g_t.

No deviation found.

**MARS** — Yuan et al. 2024, MARS-AdamW: implemented in :mod:`asyncpp.optim.mars` because the
package's denominator differs from the paper's (see there).
"""

from __future__ import annotations

import inspect
import math

from torch.optim import Optimizer

BASELINES = ("soap", "adan", "lion", "mars")

# Hyper-parameters we do not expose (they change the algorithm away from the paper's).
_HIDDEN = {"params", "kwargs", "self", "maximize"}


def _classes():
    from pytorch_optimizer import SOAP, Adan, Lion

    from .mars import MARS

    return {"soap": SOAP, "adan": Adan, "lion": Lion, "mars": MARS}


# β1 default per optimizer: the package / paper defaults.
_DEFAULT_BETAS = {
    "soap": (0.95, 0.95),
    "adan": (0.98, 0.92, 0.99),
    "lion": (0.9, 0.99),
    "mars": (0.95, 0.99),
}


def check_momentum(momentum) -> float:
    """Validate β1 ∈ [0, 1) (the swept ``momentum`` hyper-parameter) and return it as float."""
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) \
            or not (0.0 <= momentum < 1.0):
        raise ValueError(f"momentum (beta1) must lie in [0, 1), got {momentum!r}")
    return float(momentum)


def check_lr(lr) -> None:
    """Validate a learning rate: a finite number ≥ 0."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) \
            or lr < 0:
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")


def build(name: str, params, **hparams) -> Optimizer:
    r"""Build baseline ``name`` (``soap``, ``adan``, ``lion``, ``mars``) over ``params``.

    ``momentum`` sets β1 (``betas[0]``) for all four; other hyper-parameters are the class's
    own keyword arguments (unknown names are rejected, not silently ignored). Update equations:
    module docstring.
    """
    name = str(name).lower()
    if name not in BASELINES:
        raise ValueError(f"unknown baseline optimizer {name!r}; allowed: {', '.join(BASELINES)}")
    cls = _classes()[name]
    allowed = [k for k in inspect.signature(cls).parameters if k not in _HIDDEN]
    unknown = sorted(set(hparams) - set(allowed) - {"momentum"})
    if unknown:
        raise ValueError(
            f"unknown hyper-parameter(s) {unknown} for optimizer {name!r}; "
            f"allowed: {', '.join(['momentum', *allowed])}"
        )
    if "lr" in hparams:
        check_lr(hparams["lr"])
    betas = tuple(hparams.pop("betas", _DEFAULT_BETAS[name]))
    if len(betas) != len(_DEFAULT_BETAS[name]):
        raise ValueError(
            f"{name} takes {len(_DEFAULT_BETAS[name])} betas, got {betas!r}"
        )
    if "momentum" in hparams:
        betas = (check_momentum(hparams.pop("momentum")), *betas[1:])
    for b in betas:
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0.0 <= b < 1.0:
            raise ValueError(f"{name} betas must lie in [0, 1), got {betas!r}")
    return cls(params, betas=betas, **hparams)
