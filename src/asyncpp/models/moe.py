r"""Top-k mixture of SwiGLU experts with a load-balancing loss; experts stored as 3-D stacks.

For a token :math:`x` and router :math:`W_r \in \mathbb R^{E\times D}`:

.. math::
    p = \mathrm{softmax}(W_r x), \qquad
    \mathcal K = \mathrm{top}_k(p),\\
    y = \sum_{e\in\mathcal K} \frac{p_e}{\sum_{j\in\mathcal K} p_j}\,
        W_2^{(e)}\big(\mathrm{silu}(W_1^{(e)} x)\odot W_3^{(e)} x\big).

Load-balancing loss (Switch Transformer / Fedus et al.), over the N tokens of the batch:

.. math::
    \mathcal L_\text{aux} = c\, E \sum_{e=1}^{E} f_e P_e, \qquad
    f_e = \frac{\#\{(n, j): \mathcal K_n^{(j)} = e\}}{N k}, \qquad
    P_e = \frac1N \sum_n p_{n,e},

which equals :math:`c` under perfectly uniform routing. Its gradient is attached to the layer's
output (Megatron's "aux-loss auto-scaler"): the forward returns :math:`y` unchanged, the backward
also sends :math:`\partial(s\,\mathcal L_\text{aux})` into the router. So a pipeline stage that
backpropagates its output gradient trains its routers without any extra loss plumbing;
:math:`s` (``aux_loss_scale``) is 1/microbatches under gradient accumulation.

The expert weights are ``experts.w1`` (E, F, D), ``experts.w3`` (E, F, D), ``experts.w2``
(E, D, F): one 3-D tensor each, which Muon orthogonalizes slice by slice (per expert).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class _AttachAuxLoss(torch.autograd.Function):
    """Identity on ``out``; backward also feeds ``scale`` as the gradient of ``aux``."""

    @staticmethod
    def forward(ctx, out: Tensor, aux: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        ctx.aux_shape, ctx.aux_dtype = aux.shape, aux.dtype
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad, torch.full(ctx.aux_shape, ctx.scale, device=grad.device,
                                dtype=ctx.aux_dtype), None


class GroupedExperts(nn.Module):
    """E SwiGLU experts as three 3-D weights: ``w1``, ``w3`` (E, F, D) and ``w2`` (E, D, F)."""

    def __init__(self, dim: int, hidden: int, n_experts: int, device=None) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n_experts, hidden, dim, device=device))
        self.w3 = nn.Parameter(torch.empty(n_experts, hidden, dim, device=device))
        self.w2 = nn.Parameter(torch.empty(n_experts, dim, hidden, device=device))
        if str(device) != "meta":
            for w in (self.w1, self.w2, self.w3):
                nn.init.normal_(w, std=0.02)

    def expert(self, e: int, x: Tensor) -> Tensor:
        r""":math:`W_2^{(e)}(\mathrm{silu}(W_1^{(e)}x)\odot W_3^{(e)}x)` for rows ``x`` (n, D)."""
        return (F.silu(x @ self.w1[e].t()) * (x @ self.w3[e].t())) @ self.w2[e].t()


class MoE(nn.Module):
    """Top-k routed mixture of experts (see the module docstring for the equations)."""

    def __init__(self, dim: int, hidden: int, n_experts: int, top_k: int,
                 aux_loss_coef: float = 0.01, device=None) -> None:
        super().__init__()
        self.n_experts, self.top_k, self.aux_loss_coef = n_experts, top_k, aux_loss_coef
        self.router = nn.Linear(dim, n_experts, bias=False, device=device)
        self.experts = GroupedExperts(dim, hidden, n_experts, device=device)
        self.aux_loss_scale = 1.0
        self.last_aux_loss: Tensor | None = None
        self.last_counts: Tensor | None = None

    def route(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Router for rows ``x`` (N, D): probabilities (N, E) in at least float32, top-k indices
        (N, k) and the renormalised top-k weights (N, k), which sum to 1 per token."""
        logits = self.router(x)
        probs = F.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        top_p, top_i = probs.topk(self.top_k, dim=-1)
        return probs, top_i, top_p / top_p.sum(-1, keepdim=True)

    def load_balancing_loss(self, probs: Tensor, top_i: Tensor) -> tuple[Tensor, Tensor]:
        r""":math:`c E\sum_e f_e P_e` and the per-expert assignment counts."""
        N = probs.shape[0]
        counts = torch.bincount(top_i.reshape(-1), minlength=self.n_experts)
        f = counts.float() / (N * self.top_k)
        P = probs.mean(0)
        return self.aux_loss_coef * self.n_experts * (f * P).sum(), counts

    def forward(self, x: Tensor) -> Tensor:
        """Each token through its top-k experts, weighted by the router; the load-balancing
        loss is attached to the output for the backward pass (see the module docstring)."""
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs, top_i, top_w = self.route(flat)
        out = torch.zeros_like(flat)
        for e in range(self.n_experts):
            rows, slot = (top_i == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            y = self.experts.expert(e, flat[rows])
            out.index_add_(0, rows, (y * top_w[rows, slot].unsqueeze(-1)).to(out.dtype))
        aux, counts = self.load_balancing_loss(probs, top_i)
        self.last_aux_loss = aux.detach()
        self.last_counts = counts.detach()
        if self.training and torch.is_grad_enabled() and self.aux_loss_coef > 0:
            out = _AttachAuxLoss.apply(out, aux, self.aux_loss_scale)
        return out.view(shape)
