r"""MARS-AdamW (Yuan et al. 2024, "MARS: Unleashing the Power of Variance Reduction for Training
Large Models", Algorithm 2 with the approximate gradient difference of §3).

For each tensor with ≥ 2 dimensions (hidden matrices, expert stacks), step t = 1, 2, ...:

.. math::
    \begin{aligned}
    &c_t = g_t + \gamma\,\frac{\beta_1}{1-\beta_1}\,(g_t - g_{t-1}),
        \qquad g_0 := g_1 \ (\text{so } c_1 = g_1)\\
    &\tilde c_t = c_t / \max(1, \|c_t\|_2)
        &&\text{(clip the whole tensor to norm 1)}\\
    &m_t = \beta_1 m_{t-1} + (1-\beta_1)\,\tilde c_t, \qquad
     v_t = \beta_2 v_{t-1} + (1-\beta_2)\,\tilde c_t^{\,2}\\
    &x_{t+1} = x_t - \eta\Big(\frac{m_t/(1-\beta_1^t)}{\sqrt{v_t/(1-\beta_2^t)} + \epsilon}
        + \lambda\, x_t\Big)
    \end{aligned}

Tensors with fewer than 2 dimensions (norm gains, biases) get plain AdamW (:math:`c_t = g_t`,
no clipping) with the same ``lr``/``betas``/``eps``/``weight_decay``, as the paper does for
1-D parameters; ``optimize_1d=True`` applies MARS to them as well.

Why not ``pytorch_optimizer.MARS`` (4.1.0): its denominator is
:math:`(\sqrt{v_t + 10^{-15}} + \epsilon)/\sqrt{1-\beta_2^t}`, i.e. ε is divided by
:math:`\sqrt{1-\beta_2^t}` and a 1e-15 sits under the root, which is neither the paper's
:math:`\sqrt{\hat v_t} + \epsilon` nor the authors' code. Choice of :math:`g_0`: the paper sets
:math:`x_1 = x_0`, so the (exact) correction vanishes at t = 1; we keep that (:math:`g_0 := g_1`).
The authors' code and ``pytorch_optimizer`` use :math:`g_0 = 0`, which inflates
:math:`c_1 = (1 + \gamma\beta_1/(1-\beta_1))\,g_1` before clipping.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.optim import Optimizer


class MARS(Optimizer):
    """MARS-AdamW. See the module docstring for the update equations.

    Args:
        params: tensors or parameter groups.
        lr: η. betas: (β1, β2). gamma: γ, strength of the gradient correction.
        eps: ε. weight_decay: λ (decoupled, scaled by η).
        optimize_1d: apply the MARS correction to 1-D tensors too (default: AdamW for them).
    """

    def __init__(
        self,
        params,
        lr: float = 3e-3,
        betas: tuple[float, float] = (0.95, 0.99),
        gamma: float = 0.025,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        optimize_1d: bool = False,
    ) -> None:
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
            raise ValueError(f"learning rate must be a finite number >= 0, got {lr!r}")
        if len(tuple(betas)) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"MARS betas must be two numbers in [0, 1), got {betas!r}")
        if not (math.isfinite(gamma) and gamma >= 0):
            raise ValueError(f"MARS gamma must be a finite number >= 0, got {gamma!r}")
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps!r}")
        if not (math.isfinite(weight_decay) and weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
        defaults = dict(lr=lr, betas=tuple(betas), gamma=gamma, eps=eps,
                        weight_decay=weight_decay, optimize_1d=optimize_1d)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """One MARS-AdamW step over every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("MARS does not support sparse gradients")
                state = self.state[p]
                if "step" not in state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                use_mars = group["optimize_1d"] or p.ndim >= 2
                mars_update_(p, p.grad, state, group["lr"], beta1, beta2, group["gamma"],
                             group["eps"], group["weight_decay"], use_mars)
        return loss


def mars_update_(p: Tensor, grad: Tensor, state: dict, lr: float, beta1: float, beta2: float,
                 gamma: float, eps: float, weight_decay: float, use_mars: bool = True) -> None:
    r"""One MARS-AdamW step in place (module docstring); ``use_mars=False`` is AdamW:

    .. math::
        c = g + \gamma\tfrac{\beta_1}{1-\beta_1}(g - g_\text{prev}),\ \tilde c = c/\max(1,\|c\|),\
        x \leftarrow (1-\eta\lambda)x - \eta\,\frac{\hat m}{\sqrt{\hat v}+\epsilon}
    """
    state["step"] += 1
    t = float(state["step"])
    if use_mars:
        last = state.get("last_grad")
        c = grad.clone() if last is None else grad + (gamma * beta1 / (1.0 - beta1)) * (grad - last)
        norm = torch.linalg.vector_norm(c)
        if norm > 1.0:
            c.div_(norm)
        state["last_grad"] = grad.detach().clone()
    else:
        c = grad
    state["exp_avg"].lerp_(c, 1.0 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(c, c, value=1.0 - beta2)
    bias1 = 1.0 - beta1 ** t
    bias2_sqrt = (1.0 - beta2 ** t) ** 0.5
    denom = (state["exp_avg_sq"].sqrt() / bias2_sqrt).add_(eps)
    p.mul_(1.0 - lr * weight_decay)
    p.addcdiv_(state["exp_avg"], denom, value=-lr / bias1)
