"""MoE routing invariants: k distinct experts per token, weights summing to 1, output equal to a
per-token reference, the load-balancing loss formula, and its gradient reaching the router."""

from __future__ import annotations

import pytest
import torch

from asyncpp.models import MoE, build_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _moe(seed=0, E=4, k=2):
    torch.manual_seed(seed)
    m = MoE(dim=8, hidden=12, n_experts=E, top_k=k, aux_loss_coef=0.01).double()
    return m


def test_routing_invariants():
    m = _moe()
    x = torch.randn(50, 8, dtype=torch.float64)
    probs, top_i, top_w = m.route(x)
    assert top_i.shape == (50, 2)
    assert all(len(set(row.tolist())) == 2 for row in top_i)  # k distinct experts
    torch.testing.assert_close(top_w.sum(-1), torch.ones(50, dtype=torch.float64))
    torch.testing.assert_close(probs.sum(-1), torch.ones(50, dtype=torch.float64))
    # the chosen experts are the k most probable ones
    assert torch.all(probs.gather(1, top_i).min(-1).values
                     >= probs.topk(3, -1).values[:, 2] - 1e-12)


def test_output_equals_per_token_reference():
    m = _moe(1)
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    y = m(x)
    flat = x.reshape(-1, 8)
    _, top_i, top_w = m.route(flat)
    ref = torch.stack([
        sum(top_w[n, j] * m.experts.expert(int(top_i[n, j]), flat[n:n + 1])[0]
            for j in range(2))
        for n in range(flat.shape[0])
    ])
    torch.testing.assert_close(y.reshape(-1, 8), ref)


def test_load_balancing_loss_formula():
    m = _moe(2, E=4, k=2)
    x = torch.randn(40, 8, dtype=torch.float64)
    probs, top_i, _ = m.route(x)
    aux, counts = m.load_balancing_loss(probs, top_i)
    f = torch.tensor([(top_i == e).sum().item() / (40 * 2) for e in range(4)],
                     dtype=torch.float64)
    torch.testing.assert_close(aux, 0.01 * 4 * (f * probs.mean(0)).sum())
    assert counts.sum().item() == 80
    # perfectly uniform routing gives exactly the coefficient
    uniform = torch.full((8, 4), 0.25, dtype=torch.float64)
    idx = torch.tensor([[0, 1], [2, 3]] * 4)
    torch.testing.assert_close(m.load_balancing_loss(uniform, idx)[0],
                               torch.tensor(0.01, dtype=torch.float64))


def test_aux_gradient_is_attached_to_the_output():
    """Backpropagating only the layer output also trains the router through the aux loss."""
    m = _moe(3)
    m.train()
    m.aux_loss_scale = 0.5
    x = torch.randn(20, 8, dtype=torch.float64)
    (m(x) * 0).sum().backward()  # zero main-loss gradient
    g_attached = m.router.weight.grad.clone()
    m.zero_grad()
    probs, top_i, _ = m.route(x)
    (0.5 * m.load_balancing_loss(probs, top_i)[0]).backward()
    torch.testing.assert_close(g_attached, m.router.weight.grad)
    assert g_attached.abs().sum() > 0


def test_moe_model_trains_and_reports_aux_loss():
    model = build_model("moe-tiny", seed=0)
    x = torch.randint(0, 512, (2, 16))
    out = model(x)
    out.float().logsumexp(-1).mean().backward()
    aux = model.aux_loss()
    assert aux is not None and aux.item() > 0
    w1 = model.layers["0"].feed_forward.experts.w1
    assert w1.shape == (4, 96, 64) and w1.grad is not None


def test_moe_under_bf16_autocast():
    model = build_model("moe-tiny", seed=0)
    x = torch.randint(0, 512, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    y.float().sum().backward()
    assert torch.isfinite(model.layers["1"].feed_forward.experts.w2.grad).all()
