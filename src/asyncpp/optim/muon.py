r"""Muon: momentum orthogonalized by Newton–Schulz, with an AdamW side for non-matrix parameters.

.. math::
    \begin{aligned}
    &B_t = \beta B_{t-1} + (1-\beta)\, g_t
        &&\text{(EMA momentum; torch's ``lerp``)}\\
    &\tilde B_t = \begin{cases}(1-\beta)\,g_t + \beta B_t & \text{nesterov}\\
        B_t & \text{otherwise}\end{cases}\\
    &O_t = \mathrm{NS}^{(a,b,c)}_k(\tilde B_t)
        &&\text{(per matrix; 3-D stacks per leading index)}\\
    &\theta_t = (1 - \gamma\lambda)\,\theta_{t-1} - \gamma\, r(A, B)\, O_t
        &&r = \sqrt{\max(1, A/B)}\ \text{("original")} \text{ or } 0.2\sqrt{\max(A,B)}
    \end{aligned}

This is the update of ``torch.optim.Muon`` (tests assert agreement), with three differences
users asked for: Newton–Schulz runs once per *shape group* as a batched matmul chain instead
of once per matrix, 3-D parameters (MoE expert stacks ``(E, A, B)``) are accepted and
orthogonalized per expert, and the iteration precision is selectable (``ns_dtype``).

Parameter groups with ``use_muon=False`` are stepped with AdamW (the same arithmetic as
``torch.optim.AdamW``), so one optimizer object — one ``state_dict`` — covers a whole model.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch import Tensor
from torch.optim import Optimizer

from ..names import MUON_ADAMW_LR, MUON_NS_DTYPE
from .newton_schulz import (
    DEFAULT_COEFFICIENTS,
    DEFAULT_EPS,
    DEFAULT_STEPS,
    newton_schulz,
    resolve_ns_dtype,
)

LR_RULES = ("original", "match_rms_adamw", "none")


def adjusted_lr(lr: float, rule: str | None, shape: torch.Size,
                transposed: bool = False) -> float:
    r"""Muon's shape-dependent step: ``original`` :math:`\gamma\sqrt{\max(1,A/B)}`,
    ``match_rms_adamw`` :math:`0.2\gamma\sqrt{\max(A,B)}`, ``none`` :math:`\gamma`, for a
    weight mapping B inputs to A outputs: stored ``(A, B)`` as ``nn.Linear`` does, or
    ``(B, A)`` with ``transposed`` (GPT-2's ``Conv1D``, ``x @ W``)."""
    A, B = (shape[-1], shape[-2]) if transposed else (shape[-2], shape[-1])
    if rule is None or rule == "original":
        return lr * math.sqrt(max(1.0, A / B))
    if rule == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(A, B))
    if rule == "none":
        return lr
    raise ValueError(f"unknown Muon lr rule {rule!r}; allowed: {LR_RULES}")


def _check_hparams(lr, momentum, weight_decay, betas=None, eps=None):
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
        raise ValueError(f"learning rate must be a finite number >= 0, got {lr!r}")
    if not (isinstance(momentum, (int, float)) and 0.0 <= momentum < 1.0):
        raise ValueError(f"momentum must lie in [0, 1), got {momentum!r}")
    if not (isinstance(weight_decay, (int, float)) and math.isfinite(weight_decay)
            and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
    if betas is not None:
        for b in betas:
            if not 0.0 <= b < 1.0:
                raise ValueError(f"AdamW betas must lie in [0, 1), got {betas!r}")
    if eps is not None and not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")


class Muon(Optimizer):
    """Muon for matrix parameters (plus AdamW for groups marked ``use_muon=False``).

    Args:
        params: tensors or parameter groups. Groups default to ``use_muon=True``; such groups
            accept only 2-D or 3-D tensors.
        lr: Muon learning rate γ (before the shape adjustment).
        momentum: β of the EMA momentum, in [0, 1).
        nesterov: use the Nesterov combination ``lerp(g, B, β)``.
        weight_decay: decoupled weight decay λ (``θ ← (1−γλ)θ``).
        ns_coefficients, ns_steps, eps: the Newton–Schulz polynomial, iteration count and
            normalisation floor.
        adjust_lr_fn: ``"original"`` (default), ``"match_rms_adamw"`` or ``"none"``.
        ns_dtype: iteration precision: ``"auto"`` (default: bfloat16 on CUDA, as
            torch.optim.Muon, float32 elsewhere — the CLI's default too), ``"bfloat16"``,
            ``"float32"``, ``"float64"`` or ``"native"`` (the parameter's dtype).
        transposed: a parameter-group option; ``True`` marks weights stored ``(in, out)``
            (GPT-2's ``Conv1D``). The orthogonalisation is the same (the polar factor of Gᵀ is
            that of G, transposed); the shape rule reads the sides swapped
            (:func:`adjusted_lr`).
        adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay: defaults for ``use_muon=False``
            groups.
    """

    def __init__(
        self,
        params,
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        weight_decay: float = 0.0,
        ns_coefficients: tuple[float, float, float] = DEFAULT_COEFFICIENTS,
        ns_steps: int = DEFAULT_STEPS,
        eps: float = DEFAULT_EPS,
        adjust_lr_fn: str | None = "original",
        ns_dtype: str = MUON_NS_DTYPE,
        adamw_lr: float = MUON_ADAMW_LR,
        adamw_betas: tuple[float, float] = (0.9, 0.95),
        adamw_eps: float = 1e-8,
        adamw_weight_decay: float = 0.0,
    ) -> None:
        _check_hparams(lr, momentum, weight_decay)
        _check_hparams(adamw_lr, 0.0, adamw_weight_decay, adamw_betas, adamw_eps)
        if adjust_lr_fn is not None and adjust_lr_fn not in LR_RULES:
            raise ValueError(f"unknown Muon lr rule {adjust_lr_fn!r}; allowed: {LR_RULES}")
        if not (isinstance(ns_steps, int) and 0 <= ns_steps < 100):
            raise ValueError(f"ns_steps must be an integer in [0, 100), got {ns_steps!r}")
        if len(tuple(ns_coefficients)) != 3:
            raise ValueError(f"ns_coefficients must be three numbers, got {ns_coefficients!r}")
        if ns_dtype != "auto":
            resolve_ns_dtype(ns_dtype, torch.float32)
        defaults = dict(
            lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
            ns_coefficients=tuple(ns_coefficients), ns_steps=ns_steps, eps=eps,
            adjust_lr_fn=adjust_lr_fn, ns_dtype=ns_dtype, use_muon=True, transposed=False,
            adamw_lr=adamw_lr, betas=tuple(adamw_betas), adamw_eps=adamw_eps,
            adamw_weight_decay=adamw_weight_decay,
        )
        super().__init__(params, defaults)
        n_muon = 0
        for group in self.param_groups:
            if group["use_muon"]:
                for p in group["params"]:
                    if p.ndim not in (2, 3):
                        raise ValueError(
                            f"Muon groups take 2-D matrices or 3-D expert stacks, got a tensor "
                            f"of shape {tuple(p.shape)}; put it in a group with use_muon=False "
                            "(build_optimizer('muon', ...) does this by name and shape)"
                        )
                    n_muon += 1
        if n_muon == 0:
            raise ValueError(
                "Muon was given no matrix parameters: every group has use_muon=False or is "
                "empty; use AdamW for such a model, or pass its 2-D hidden weights"
            )

    @torch.no_grad()
    def step(self, closure=None):
        """One optimisation step over all groups (parameters without a gradient are skipped)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["use_muon"]:
                self._muon_group(group)
            else:
                self._adamw_group(group)
        return loss

    def _muon_group(self, group) -> None:
        beta = group["momentum"]
        # Matrices of one shape, dtype and device share one batched Newton–Schulz call.
        buckets: dict[tuple, list[tuple[Tensor, Tensor]]] = defaultdict(list)
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("Muon does not support sparse gradients")
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            buf = state["momentum_buffer"]
            buf.lerp_(p.grad, 1 - beta)
            update = p.grad.lerp(buf, beta) if group["nesterov"] else buf
            key = (tuple(p.shape[-2:]), p.dtype, p.device)
            buckets[key].append((p, update))
        for (_, dtype, device), items in buckets.items():
            name = group["ns_dtype"]
            if name == "auto":
                name = "bfloat16" if device.type == "cuda" else "float32"
            ns_dtype = resolve_ns_dtype(name, dtype)
            stacked = torch.cat([u.reshape(-1, *u.shape[-2:]) for _, u in items])
            ortho = newton_schulz(
                stacked, group["ns_steps"], group["ns_coefficients"], group["eps"], ns_dtype
            )
            offset = 0
            for p, _ in items:
                count = p.numel() // (p.shape[-2] * p.shape[-1])
                o = ortho[offset:offset + count].reshape(p.shape)
                offset += count
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(o, alpha=-adjusted_lr(group["lr"], group["adjust_lr_fn"], p.shape,
                                             group.get("transposed", False)))

    def _adamw_group(self, group) -> None:
        beta1, beta2 = group["betas"]
        lr, eps, wd = group["adamw_lr"], group["adamw_eps"], group["adamw_weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "step" not in state:
                state["step"] = torch.tensor(0.0)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            adamw_update_(p, p.grad, state, lr, beta1, beta2, eps, wd)


def adamw_update_(p: Tensor, grad: Tensor, state: dict, lr: float, beta1: float, beta2: float,
                  eps: float, weight_decay: float) -> None:
    r"""AdamW in place, with the arithmetic of ``torch.optim.AdamW`` (single-tensor path):

    .. math::
        \theta \leftarrow (1-\gamma\lambda)\theta - \frac{\gamma}{1-\beta_1^t}\,
        \frac{m_t}{\sqrt{v_t}/\sqrt{1-\beta_2^t} + \epsilon}
    """
    state["step"] += 1
    t = float(state["step"])
    p.mul_(1 - lr * weight_decay)
    state["exp_avg"].lerp_(grad, 1 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias1 = 1 - beta1 ** t
    bias2_sqrt = (1 - beta2 ** t) ** 0.5  # as torch.optim.AdamW (not math.sqrt)
    denom = (state["exp_avg_sq"].sqrt() / bias2_sqrt).add_(eps)
    p.addcdiv_(state["exp_avg"], denom, value=-lr / bias1)
