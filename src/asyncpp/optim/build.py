"""``build_optimizer``: one entry point from a name and hyper-parameters to an optimizer."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable

import torch
from torch import nn
from torch.optim import Optimizer

from ..names import OPTIMIZERS  # one source, shared with the configuration
from . import baselines
from .baselines import check_lr, check_momentum
from .muon import Muon

# Names that mark embedding / output-head / MoE-router matrices: 2-D, but not hidden layers,
# so Muon's "orthogonalize the whole matrix" does not apply to them (Jordan et al.; Moonlight).
DEFAULT_NON_MUON_PATTERN = (
    r"(^|\.)(embed|embed_tokens|tok_embeddings|wte|wpe|lm_head|head|output|router)(\.|$)"
)




def split_muon_params(
    named_parameters: Iterable[tuple[str, nn.Parameter]],
    non_muon_pattern: str = DEFAULT_NON_MUON_PATTERN,
) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """Hidden 2-D/3-D matrices → Muon; embeddings, head (by name), norms and biases (by shape)
    → AdamW. Returns ``(muon_params, adamw_params)``; shared (tied) tensors appear once."""
    muon, other, seen = [], [], set()
    rx = re.compile(non_muon_pattern)
    for name, p in named_parameters:
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if p.ndim in (2, 3) and not rx.search(name):
            muon.append(p)
        else:
            other.append(p)
    return muon, other


def _reject_unknown(name: str, hparams: dict, cls, extra: tuple[str, ...] = ()) -> None:
    """Unknown keyword → ValueError naming it and the allowed ones (not a TypeError from torch)."""
    allowed = [k for k in inspect.signature(cls).parameters if k not in ("params", "self")]
    allowed += list(extra)
    unknown = sorted(set(hparams) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown hyper-parameter(s) {unknown} for optimizer {name!r}; "
            f"allowed: {', '.join(allowed)}"
        )


def build_optimizer(name: str, named_parameters, **hparams) -> Optimizer:
    r"""Build optimizer ``name`` over ``named_parameters`` (an iterable of ``(name, param)``).

    ``muon`` returns one :class:`~asyncpp.optim.Muon` with a Muon group for hidden matrices and
    an AdamW group for everything else (``adamw_*`` hyper-parameters; ``non_muon_pattern``
    overrides the name rule). Hidden matrices whose names match ``transposed_pattern`` are
    stored ``(in, out)`` — GPT-2's ``Conv1D``, e.g. ``r"\.(c_attn|c_proj|c_fc)\.weight$"`` —
    and go to a Muon group with ``transposed=True``, so the shape rule reads their sides the
    right way round. Other names build the corresponding single optimizer over all
    parameters.
    """
    name = str(name).lower()
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}")
    named = list(named_parameters)
    if "lr" in hparams:
        check_lr(hparams["lr"])
    if "momentum" in hparams:
        hparams["momentum"] = check_momentum(hparams["momentum"])
    if name == "muon":
        pattern = hparams.pop("non_muon_pattern", DEFAULT_NON_MUON_PATTERN)
        flipped = hparams.pop("transposed_pattern", None)
        _reject_unknown(name, hparams, Muon, ("non_muon_pattern", "transposed_pattern"))
        muon_params, other = split_muon_params(named, pattern)
        if not muon_params:
            raise ValueError(
                "optimizer 'muon' found no hidden matrix parameters (2-D/3-D tensors whose names "
                f"do not match {pattern!r}); use 'adamw' for this model or change non_muon_pattern"
            )
        groups = [{"params": muon_params, "use_muon": True}]
        if flipped is not None:
            rule = re.compile(flipped)
            marked = {id(p) for n, p in named if rule.search(n)}
            groups = [{"params": [p for p in muon_params if id(p) not in marked],
                       "use_muon": True},
                      {"params": [p for p in muon_params if id(p) in marked],
                       "use_muon": True, "transposed": True}]
            groups = [g for g in groups if g["params"]]
        if other:
            groups.append({"params": other, "use_muon": False})
        return Muon(groups, **hparams)
    params = [p for _, p in named if p.requires_grad]
    if name == "adamw":
        _reject_unknown(name, hparams, torch.optim.AdamW, ("momentum",))
        betas = tuple(hparams.pop("betas", (0.9, 0.95)))
        if "momentum" in hparams:
            betas = (hparams.pop("momentum"), betas[1])
        for b in betas:
            if not 0.0 <= b < 1.0:
                raise ValueError(f"AdamW betas must lie in [0, 1), got {betas!r}")
        return torch.optim.AdamW(params, betas=betas, **hparams)
    return baselines.build(name, params, **hparams)
