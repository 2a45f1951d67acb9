"""The Nesterov delay correction (``correction="nesterov"``, ``asyncpp.delay.nesterov``) against
its defining equations: θ_t = x_t + c(x_t − x_{t−1}), x_{t+1} = x_t − u(t),
c = Σ_{k=1}^{τ+1} β^k."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from asyncpp.delay import DelayedOptimizer, lookahead_coefficient, resolve_nesterov
from asyncpp.train.config import ConfigError, load_config


def test_lookahead_coefficient_values():
    assert lookahead_coefficient(0.5, 0) == 0.0
    assert lookahead_coefficient(0.5, 1) == 0.75            # 0.5 + 0.25
    assert lookahead_coefficient(0.5, 2) == 0.875           # + 0.125
    assert lookahead_coefficient(0.0, 3) == 0.0
    assert lookahead_coefficient(0.9, 1) == pytest.approx(0.9 + 0.81, abs=1e-15)
    # closed form β(1 − β^{τ+1})/(1 − β)
    assert lookahead_coefficient(0.99, 3) == pytest.approx(0.99 * (1 - 0.99 ** 4) / 0.01, rel=1e-12)
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="nesterov_beta"):
            lookahead_coefficient(bad, 1)
    with pytest.raises(ValueError, match="tau"):
        lookahead_coefficient(0.5, -1)


def _scalar(opt_kw, delay, **kw):
    x = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = torch.optim.SGD([x], **opt_kw)
    return x, DelayedOptimizer(opt, delay=delay, correction="nesterov", **kw)


def test_hand_checked_example_tau1():
    """f(θ) = θ²/2, SGD(lr 0.5, momentum 0.5, dampening 0.5), τ = 1: c = 0.75.
    By hand (torch starts the momentum buffer at the first gradient, undamped):
    θ1 = θ0 = 1 (nothing due); g0 = 1 → m = 1, u = 0.5, θ2 = 1 − 1.75·0.5 = 0.125;
    g1 = θ1 = 1 → m = 0.5 + 0.5 = 1, u = 0.5, θ3 = 0.125 − 1.75·0.5 + 0.75·0.5 = −0.375;
    g2 = θ2 = 0.125 → m = 0.5 + 0.0625 = 0.5625, u = 0.28125,
    θ4 = −0.375 − 1.75·0.28125 + 0.75·0.5 = −0.4921875.
    The plain sequence x_t = θ_t + c·u(t−1): 1, 1, 0.5, 0, −0.28125 (x_{t+1} = x_t − u(t)),
    and θ_t = x_t + c(x_t − x_{t−1}): 0.5 + 0.75·(−0.5) = 0.125 ✓, 0 + 0.75·(−0.5) = −0.375 ✓."""
    x, dopt = _scalar(dict(lr=0.5, momentum=0.5, dampening=0.5), 1)
    assert dopt.ef_gammas == (0.75,)
    traj = [x.item()]
    for _ in range(4):
        x.grad = x.detach().clone()          # ∇(θ²/2) at the stored (look-ahead) weights
        dopt.step()
        traj.append(x.item())
    assert traj == [1.0, 1.0, 0.125, -0.375, -0.4921875]


@pytest.mark.parametrize("beta,tau", [(0.5, 1), (0.9, 1), (0.9, 2), (0.95, 3)])
def test_gradient_is_taken_at_the_lookahead_of_the_plain_sequence(beta, tau):
    """Independently: run the plain delayed sequence x_{t+1} = x_t − u(t) (u from the same
    SGD-momentum recursion) with every gradient evaluated at θ_t = x_t + c(x_t − x_{t−1});
    the wrapper's stored weights must be exactly those θ_t."""
    h, lr = 0.7, 0.3
    c = lookahead_coefficient(beta, tau)
    x, dopt = _scalar(dict(lr=lr, momentum=beta, dampening=beta), tau)
    xs = [1.0, 1.0]            # x_{-1} = x_0 (no previous step)
    m, grads = 0.0, []
    for t in range(25):
        theta = xs[-1] + c * (xs[-1] - xs[-2])
        assert x.item() == pytest.approx(theta, rel=1e-12, abs=1e-13), t
        x.grad = h * x.detach().clone()
        dopt.step()
        grads.append(h * theta)
        u = 0.0
        if t >= tau:
            # torch's momentum buffer starts at the first gradient (undamped)
            m = grads[0] if t == tau else beta * m + (1 - beta) * grads[t - tau]
            u = lr * m
        xs.append(xs[-1] - u)


def test_tau0_lookahead_is_nag():
    """c_0 would be β: the recursion θ ← θ − (1+β)u + βu_prev with heavy-ball SGD is
    torch's Nesterov SGD exactly (the reason for the +1 in Σ_{k=1}^{τ+1})."""
    torch.manual_seed(0)
    A = torch.randn(5, 5, dtype=torch.float64)
    A = A @ A.T / 5 + torch.eye(5, dtype=torch.float64)
    beta, lr = 0.9, 0.05
    a = torch.nn.Parameter(torch.ones(5, dtype=torch.float64))
    b = torch.nn.Parameter(torch.ones(5, dtype=torch.float64))
    nag = torch.optim.SGD([a], lr=lr, momentum=beta, nesterov=True)
    hb = torch.optim.SGD([b], lr=lr, momentum=beta)
    prev = torch.zeros(5, dtype=torch.float64)
    for _ in range(30):
        a.grad = A @ a.detach()
        nag.step()
        b.grad = A @ b.detach()
        before = b.detach().clone()
        hb.step()
        with torch.no_grad():
            u = before - b
            b.copy_(before - (1 + beta) * u + beta * prev)
        prev = u
    assert torch.allclose(a, b, rtol=0, atol=1e-13)


def test_per_stage_delays_get_per_stage_coefficients():
    ps = [torch.nn.Parameter(torch.zeros(2)) for _ in range(3)]
    opt = torch.optim.AdamW([{"params": [p]} for p in ps], betas=(0.9, 0.95))
    dopt = DelayedOptimizer(opt, delay=[2, 1, 0], correction="nesterov")
    assert dopt.ef_gammas == pytest.approx((0.9 + 0.81 + 0.729, 0.9 + 0.81, 0.0), abs=1e-15)
    dopt = DelayedOptimizer(opt, delay=[2, 1, 0], correction="nesterov", nesterov_beta=0.5)
    assert dopt.ef_gammas == (0.875, 0.75, 0.0)
    assert resolve_nesterov([0.5, 0.0, 0.9], opt.param_groups, [1, 1, 1]) == (0.75, 0.0,
                                                                              0.9 + 0.81)


def test_pipedream_delays_match_explicit_recursion_per_group():
    """Two groups, τ = (2, 0): group 0 follows the look-ahead recursion with c_2, group 1 is
    plain synchronous SGD-momentum (τ = 0: never corrected)."""
    beta, lr, h = 0.8, 0.2, 1.3
    p0 = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    p1 = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = torch.optim.SGD([{"params": [p0]}, {"params": [p1]}], lr=lr, momentum=beta,
                          dampening=beta)
    dopt = DelayedOptimizer(opt, delay=[2, 0], correction="nesterov")
    ref = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    ref_opt = torch.optim.SGD([ref], lr=lr, momentum=beta, dampening=beta)
    c = lookahead_coefficient(beta, 2)
    xs, m, grads = [1.0, 1.0], 0.0, []
    for t in range(15):
        theta = xs[-1] + c * (xs[-1] - xs[-2])
        assert p0.item() == pytest.approx(theta, rel=1e-12, abs=1e-13)
        assert p1.item() == pytest.approx(ref.item(), rel=0, abs=1e-15)
        grads.append(h * p0.item())
        p0.grad, p1.grad = h * p0.detach().clone(), h * p1.detach().clone()
        dopt.step()
        ref.grad = h * ref.detach().clone()
        ref_opt.step()
        u = 0.0
        if t >= 2:
            m = grads[0] if t == 2 else beta * m + (1 - beta) * grads[t - 2]
            u = lr * m
        xs.append(xs[-1] - u)


def test_state_dict_resume_carries_the_lookahead_memory():
    torch.manual_seed(1)
    A = torch.randn(4, 4, dtype=torch.float64)
    A = A @ A.T / 4 + 0.5 * torch.eye(4, dtype=torch.float64)

    def make():
        p = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))
        return p, DelayedOptimizer(torch.optim.AdamW([p], lr=0.05, betas=(0.9, 0.99)),
                                   delay=2, correction="nesterov")

    def run(p, d, n):
        for _ in range(n):
            p.grad = A @ p.detach()
            d.step()

    p, d = make()
    run(p, d, 12)
    q, e = make()
    run(q, e, 5)
    state, weights = copy.deepcopy(e.state_dict()), q.detach().clone()
    r, f = make()
    with torch.no_grad():
        r.copy_(weights)
    f.load_state_dict(state)
    assert f.prev_update[0] is not None       # the u(t−1) of the look-ahead travelled
    run(r, f, 7)
    assert torch.equal(r, p)
    # a checkpoint of the Nesterov correction does not load into an EF run
    s, g = make()
    ef = DelayedOptimizer(g.optimizer, delay=2, correction="ef")
    with pytest.raises(ValueError, match="delay settings"):
        ef.load_state_dict(state)


def test_misuse_is_one_clear_error():
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="nesterov_beta=0.5 applies only to correction='nesterov'"):
        DelayedOptimizer(opt, delay=1, correction="ef", nesterov_beta=0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        DelayedOptimizer(opt, delay=1, correction="nesterov", nesterov_beta=1.0)
    with pytest.raises(ValueError, match="'auto'"):
        DelayedOptimizer(opt, delay=1, correction="nesterov", nesterov_beta="fast")
    plain = torch.optim.SGD([p], lr=0.1)   # momentum 0 → c = 0: allowed, no correction
    assert DelayedOptimizer(plain, delay=1, correction="nesterov").ef_gammas == (0.0,)


def test_config_accepts_and_validates_nesterov(tmp_path):
    base = [("pipeline.schedule", "2bw"), ("pipeline.stages", "2"),
            ("pipeline.microbatches", "2"), ("pipeline.simulate", "true")]
    cfg = load_config(None, [*base, ("delay.correction", "nesterov")])
    assert cfg.delay.correction == "nesterov" and cfg.delay.nesterov_beta == "auto"
    cfg = load_config(None, [*base, ("delay.correction", "nesterov"),
                             ("delay.nesterov_beta", "0.9")])
    assert math.isclose(float(cfg.delay.nesterov_beta), 0.9)
    with pytest.raises(ConfigError, match="applies to --delay.correction nesterov"):
        load_config(None, [*base, ("delay.correction", "ef"), ("delay.nesterov_beta", "0.9")])
    with pytest.raises(ConfigError, match=r"must be a number in \[0, 1\) or auto"):
        load_config(None, [*base, ("delay.correction", "nesterov"),
                           ("delay.nesterov_beta", "1.5")])
