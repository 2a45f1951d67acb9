"""build_optimizer: Muon/AdamW routing, the uniform ``momentum`` hyper-parameter, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from asyncpp.optim import OPTIMIZERS, Muon, build_optimizer

pytestmark = pytest.mark.usefixtures("one_thread")


class Tiny(nn.Module):
    """Embedding, a hidden linear with bias, a norm, an expert stack and a (tied) output head."""

    def __init__(self, tie: bool = False, dtype=torch.float32):
        super().__init__()
        self.embed_tokens = nn.Embedding(11, 8, dtype=dtype)
        self.layers = nn.ModuleList([nn.Linear(8, 8, dtype=dtype)])
        self.experts = nn.Parameter(torch.randn(2, 8, 8, dtype=dtype))
        self.norm = nn.LayerNorm(8, dtype=dtype)
        self.lm_head = nn.Linear(8, 11, bias=False, dtype=dtype)
        if tie:
            self.lm_head.weight = self.embed_tokens.weight


def _names(model, params):
    ids = {id(p) for p in params}
    return sorted(n for n, p in model.named_parameters() if id(p) in ids)


def test_muon_routing_by_shape_and_name():
    model = Tiny()
    opt = build_optimizer("muon", model.named_parameters())
    assert isinstance(opt, Muon)
    muon_group, adamw_group = opt.param_groups
    assert muon_group["use_muon"] and not adamw_group["use_muon"]
    assert _names(model, muon_group["params"]) == ["experts", "layers.0.weight"]
    assert _names(model, adamw_group["params"]) == [
        "embed_tokens.weight", "layers.0.bias", "lm_head.weight", "norm.bias", "norm.weight"]
    # Tied embedding/head: one tensor, listed once.
    tied = Tiny(tie=True)
    opt = build_optimizer("muon", tied.named_parameters())
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(tied.parameters()))
    # The name rule is overridable: here only "experts" is kept away from Muon.
    opt = build_optimizer("muon", model.named_parameters(), non_muon_pattern=r"^experts$")
    assert _names(model, opt.param_groups[0]["params"]) == [
        "embed_tokens.weight", "layers.0.weight", "lm_head.weight"]


def test_adamw_side_equals_torch_adamw_exactly():
    torch.manual_seed(0)
    model = Tiny(dtype=torch.float64)
    hp = dict(adamw_lr=3e-3, adamw_betas=(0.8, 0.97), adamw_eps=1e-10, adamw_weight_decay=0.05)
    opt = build_optimizer("muon", model.named_parameters(), **hp)
    others = opt.param_groups[1]["params"]
    copies = [nn.Parameter(p.detach().clone()) for p in others]
    ref = torch.optim.AdamW(copies, lr=3e-3, betas=(0.8, 0.97), eps=1e-10, weight_decay=0.05)
    for _ in range(10):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        for p, c in zip(others, copies):
            c.grad = p.grad.clone()
        opt.step()
        ref.step()
        assert all(torch.equal(p, c) for p, c in zip(others, copies))


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_momentum_is_beta1_for_every_optimizer(name):
    model = Tiny()
    opt = build_optimizer(name, model.named_parameters(), momentum=0.7)
    group = opt.param_groups[0]
    beta1 = group["momentum"] if name == "muon" else group["betas"][0]
    assert beta1 == 0.7
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_unknown_optimizer_name():
    with pytest.raises(ValueError, match=r"'sgdx'.*allowed: adamw, muon, soap, adan, lion, mars"):
        build_optimizer("sgdx", Tiny().named_parameters())


def test_muon_without_matrix_parameters():
    model = nn.Sequential(nn.LayerNorm(4))
    with pytest.raises(ValueError, match="no hidden matrix parameters.*adamw"):
        build_optimizer("muon", model.named_parameters())
    with pytest.raises(ValueError, match="no matrix parameters"):
        Muon([{"params": list(model.parameters()), "use_muon": False}])
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        Muon(list(model.parameters()))


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("lr", [math.nan, math.inf, -math.inf])
def test_non_finite_lr(name, lr):
    with pytest.raises(ValueError, match=rf"finite.*{lr!r}"):
        build_optimizer(name, Tiny().named_parameters(), lr=lr)


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("momentum", [1.0, -0.1, 1.5, math.nan])
def test_momentum_outside_unit_interval(name, momentum):
    with pytest.raises(ValueError, match=rf"\[0, 1\), got {momentum!r}"):
        build_optimizer(name, Tiny().named_parameters(), momentum=momentum)


def test_direct_muon_bad_hparams():
    w = [nn.Parameter(torch.randn(4, 4))]
    with pytest.raises(ValueError, match=r"\[0, 1\), got 1.0"):
        Muon(w, momentum=1.0)
    with pytest.raises(ValueError, match="finite.*nan"):
        Muon(w, lr=math.nan)
    with pytest.raises(ValueError, match="'bogus'.*allowed"):
        Muon(w, adjust_lr_fn="bogus")


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_unknown_hyper_parameter_is_rejected(name):
    with pytest.raises(ValueError, match=r"\['lrr'\].*allowed"):
        build_optimizer(name, Tiny().named_parameters(), lrr=0.1)
