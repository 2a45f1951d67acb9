"""Adan's β's through the configuration (issue 21, H5).

``optimizer.beta1`` (default 0.9, the AdamW value) is Adan's β₁; ``optimizer.adan_beta2`` and
``optimizer.adan_beta3`` (torch convention, defaults 0.92 and 0.99) its other two. The
reference implementation (Xie et al.'s code, ``pytorch_optimizer.Adan``) defaults to
(0.98, 0.92, 0.99): ``--optimizer.beta1 0.98`` must reproduce it bit for bit, and the defaults
must keep the behaviour every committed Adan run had (β = (0.9, 0.92, 0.99)).
"""

from __future__ import annotations

import copy

import pytest
import torch
from pytorch_optimizer import Adan

from asyncpp.optim import build_optimizer
from asyncpp.train.components import optimizer_hparams
from asyncpp.train.config import ConfigError, load_config

pytestmark = pytest.mark.usefixtures("one_thread")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 3)).double()


def _train(model, opt, steps=6):
    """Real gradients of a regression loss; returns the parameters after each step."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 6, dtype=torch.float64, generator=g)
    y = torch.randn(16, 3, dtype=torch.float64, generator=g)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        out.append([p.detach().clone() for p in model.parameters()])
    return out


def _from_config(model, *overrides):
    cfg = load_config(None, [("optimizer.name", "adan"), ("optimizer.lr", "0.01"),
                             ("optimizer.weight_decay", "0.1"), *overrides])
    hp = optimizer_hparams(cfg, torch.device("cpu"))
    return build_optimizer("adan", model.named_parameters(), **hp)


def test_reference_betas_from_config_equal_reference_adan_bit_for_bit():
    ours = _model()
    ref = copy.deepcopy(ours)
    opt = _from_config(ours, ("optimizer.beta1", "0.98"))
    assert opt.param_groups[0]["betas"] == (0.98, 0.92, 0.99)
    ref_opt = Adan(ref.parameters(), lr=0.01, weight_decay=0.1)  # the reference's defaults
    assert ref_opt.param_groups[0]["betas"] == (0.98, 0.92, 0.99)
    a, b = _train(ours, opt), _train(ref, ref_opt)
    for t, (pa, pb) in enumerate(zip(a, b)):
        for x, y in zip(pa, pb):
            assert torch.equal(x, y), f"step {t + 1}"
    # and the run moved: the comparison is not between two untouched models
    assert not torch.equal(a[-1][0], _model()[0].weight.detach())


def test_default_config_keeps_the_committed_runs_betas():
    ours = _model()
    before = copy.deepcopy(ours)
    opt = _from_config(ours)
    assert opt.param_groups[0]["betas"] == (0.9, 0.92, 0.99)
    # the call every committed Adan run made before the keys existed
    old = build_optimizer("adan", before.named_parameters(), lr=0.01, weight_decay=0.1,
                          momentum=0.9)
    for pa, pb in zip(_train(ours, opt)[-1], _train(before, old)[-1]):
        assert torch.equal(pa, pb)
    # β₁ = 0.9 is not the reference: the trajectories differ
    ref, mine = _model(), _model()
    ref_last = _train(ref, Adan(ref.parameters(), lr=0.01, weight_decay=0.1))[-1]
    assert not torch.equal(_train(mine, _from_config(mine))[-1][0], ref_last[0])


def test_adan_beta2_beta3_pass_through_and_are_validated():
    opt = _from_config(_model(), ("optimizer.adan_beta2", "0.08"),
                       ("optimizer.adan_beta3", "0.01"))
    assert opt.param_groups[0]["betas"] == (0.9, 0.08, 0.01)
    with pytest.raises(ConfigError):
        load_config(None, [("optimizer.adan_beta3", "1.0")])
