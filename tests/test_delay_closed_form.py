"""DelayedOptimizer trajectories against hand-derived recursions (float64, SGD on f = h·x²/2).

Notation: x(t) are the weights before step t, g(t) = h⊙x(t) the gradient computed there, η the
SGD learning rate. Every reference is computed with the same tensor operations as
``torch.optim.SGD`` so that "exact" means ``torch.equal``; where the wrapper necessarily
rounds differently (EF forms u = x − (x − ηg)), the comparison is to float64 round-off.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncpp.delay import DelayedOptimizer
from asyncpp.optim import build_optimizer

pytestmark = pytest.mark.usefixtures("one_thread")

F64 = torch.float64
H = torch.tensor([0.5, 2.0, 3.0], dtype=F64)
X0 = torch.tensor([1.0, -0.7, 0.3], dtype=F64)
ETA = 0.1
PROPS = settings(max_examples=25, deadline=None, derandomize=True)


def run_quadratic(steps, h=H, x0=X0, lr=ETA, sgd=None, flush=False, **wrap):
    """Trajectory [x(0), ..., x(steps)] of DelayedOptimizer(SGD) on f = h·x²/2."""
    x = torch.nn.Parameter(x0.clone())
    opt = DelayedOptimizer(torch.optim.SGD([x], lr=lr, **(sgd or {})), **wrap)
    traj = [x.detach().clone()]
    for _ in range(steps):
        x.grad = h * x.detach()
        opt.step()
        traj.append(x.detach().clone())
    if flush:
        opt.flush()
        traj.append(x.detach().clone())
    return traj, opt


def delayed_reference(steps, tau, h=H, x0=X0, lr=ETA):
    """x(t+1) = x(t) for t < τ; x(t+1) = x(t) − η h x(t−τ) for t ≥ τ."""
    x = [x0.clone()]
    for t in range(steps):
        x.append(x[t].clone() if t < tau else x[t].add(h * x[t - tau], alpha=-lr))
    return x


def assert_equal_traj(got, expected):
    assert len(got) == len(expected)
    for t, (a, b) in enumerate(zip(got, expected)):
        assert torch.equal(a, b), f"t={t}: {a} != {b}"


def assert_close_traj(got, expected, rtol=1e-12):
    assert len(got) == len(expected)
    for t, (a, b) in enumerate(zip(got, expected)):
        torch.testing.assert_close(a, b, rtol=rtol, atol=1e-15, msg=f"t={t}")


# -- delay 0 -------------------------------------------------------------------------------------

def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


@pytest.mark.parametrize("name", ["adamw", "muon"])
@pytest.mark.parametrize("correction", ["none", "ef", "taylor"])
def test_delay_zero_is_bit_identical(name, correction):
    data = torch.randn(16, 6, generator=torch.Generator().manual_seed(1))
    target = torch.randn(16, 3, generator=torch.Generator().manual_seed(2))
    a, b = _model(), _model()
    opt_a = build_optimizer(name, a.named_parameters(), lr=0.01, weight_decay=0.1)
    opt_b = DelayedOptimizer(build_optimizer(name, b.named_parameters(), lr=0.01,
                                             weight_decay=0.1), delay=0, correction=correction)
    for _ in range(20):
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(data), target).backward()
            opt.step()
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p, q)
    assert opt_b.pending() == 0 and opt_b.extra_bytes() == 0


# -- constant delay ------------------------------------------------------------------------------

def test_delay_one_closed_form():
    """x(t+1) = x(t) − ηh·x(t−1), x(1) = x(0)."""
    got, _ = run_quadratic(30, delay=1)
    assert torch.equal(got[1], got[0])
    assert_equal_traj(got, delayed_reference(30, 1))


def test_delay_two_closed_form():
    """x(t+1) = x(t) − ηh·x(t−2), x(2) = x(1) = x(0)."""
    got, _ = run_quadratic(30, delay=2)
    assert torch.equal(got[2], got[0])
    assert_equal_traj(got, delayed_reference(30, 2))


@given(tau=st.integers(0, 4), steps=st.integers(1, 16),
       eta=st.floats(0.01, 0.5), h=st.floats(0.1, 3.0))
@PROPS
def test_delay_tau_closed_form_property(tau, steps, eta, h):
    hv = torch.tensor([h, 2 * h], dtype=F64)
    got, opt = run_quadratic(steps, h=hv, x0=X0[:2], lr=eta, delay=tau)
    assert_equal_traj(got, delayed_reference(steps, tau, h=hv, x0=X0[:2], lr=eta))
    assert opt.pending() == min(tau, steps)


def test_per_group_delays_group_by_group():
    """Two groups, delays (0, 2): group 0 is plain SGD, group 1 the delay-2 recursion."""
    h0, h1 = torch.tensor([1.5, 0.4], dtype=F64), torch.tensor([2.5], dtype=F64)
    a = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=F64))
    b = torch.nn.Parameter(torch.tensor([-1.0], dtype=F64))
    opt = DelayedOptimizer(torch.optim.SGD([{"params": [a]}, {"params": [b]}], lr=ETA),
                           delay=[0, 2])
    ta, tb = [a.detach().clone()], [b.detach().clone()]
    for _ in range(25):
        a.grad, b.grad = h0 * a.detach(), h1 * b.detach()
        opt.step()
        ta.append(a.detach().clone())
        tb.append(b.detach().clone())
    assert_equal_traj(ta, delayed_reference(25, 0, h=h0, x0=ta[0]))
    assert_equal_traj(tb, delayed_reference(25, 2, h=h1, x0=tb[0]))


# -- error feedback ------------------------------------------------------------------------------

def ef_reference(steps, tau, momentum=0.0, h=H, x0=X0, lr=ETA):
    """EF: x(t+1) = x(t) − 2u(t−τ) + u(t−τ−1), u(<0) = 0, where u(s) is SGD's update for the
    gradient g(s) = h x(s) (with momentum: b(s) = μ b(s−1) + g(s), b(0) = g(0), u = η b)."""
    x, u_prev, buf = [x0.clone()], torch.zeros_like(x0), None
    for t in range(steps):
        if t < tau:
            x.append(x[t].clone())
            continue
        g = h * x[t - tau]
        buf = g.clone() if buf is None else buf * momentum + g
        u = lr * buf
        x.append(x[t] - 2 * u + u_prev)
        u_prev = u
    return x


@pytest.mark.parametrize("tau", [1, 2])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_error_feedback_recursion(tau, momentum):
    got, _ = run_quadratic(30, delay=tau, correction="ef", sgd={"momentum": momentum})
    assert_close_traj(got, ef_reference(30, tau, momentum))


def test_error_feedback_delay_one_hand_expansion():
    """τ = 1, SGD: x(1) = x(0), x(2) = x(1) − 2ηh x(0), x(t+1) = x(t) − 2ηh x(t−1) + ηh x(t−2)."""
    got, _ = run_quadratic(20, delay=1, correction="ef")
    x = [X0.clone(), X0.clone(), X0 - 2 * ETA * H * X0]
    for t in range(2, 20):
        x.append(x[t] - 2 * ETA * H * x[t - 1] + ETA * H * x[t - 2])
    assert_close_traj(got, x)


@given(tau=st.integers(1, 3), steps=st.integers(1, 14), eta=st.floats(0.01, 0.4),
       momentum=st.sampled_from([0.0, 0.5]))
@PROPS
def test_error_feedback_property(tau, steps, eta, momentum):
    got, _ = run_quadratic(steps, lr=eta, delay=tau, correction="ef",
                           sgd={"momentum": momentum})
    assert_close_traj(got, ef_reference(steps, tau, momentum, lr=eta))


def test_track_updates_does_not_change_error_feedback():
    plain, _ = run_quadratic(15, delay=1, correction="ef", sync_start=3)
    tracked, opt = run_quadratic(15, delay=1, correction="ef", sync_start=3,
                                 track_updates=True)
    assert_equal_traj(tracked, plain)
    assert len(opt.stats) == 14 and all(s["update_norm"] > 0 for s in opt.stats)


# -- the two formulations --------------------------------------------------------------------------

@pytest.mark.parametrize("tau", [1, 2])
@pytest.mark.parametrize("correction", ["none", "ef"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_formulations_agree_without_weight_decay(tau, correction, momentum):
    kw = dict(delay=tau, correction=correction, sgd={"momentum": momentum}, flush=True)
    grad_form, _ = run_quadratic(25, formulation="gradient", **kw)
    upd_form, _ = run_quadratic(25, formulation="update", **kw)
    assert_close_traj(upd_form, grad_form)


def test_formulations_with_weight_decay():
    """SGD weight decay λ (g ← g + λx), τ = 1:
    gradient: x(t+1) = x(t) − η(h x(t−1) + λ x(t));  update: x(t+1) = x(t) − η(h + λ) x(t−1)."""
    lam = 0.3
    grad_form, _ = run_quadratic(25, delay=1, formulation="gradient", sgd={"weight_decay": lam})
    upd_form, _ = run_quadratic(25, delay=1, formulation="update", sgd={"weight_decay": lam})
    xg, xu = [X0.clone(), X0.clone()], [X0.clone(), X0.clone()]
    for t in range(1, 25):
        xg.append(xg[t] - ETA * (H * xg[t - 1] + lam * xg[t]))
        xu.append(xu[t] - ETA * (H + lam) * xu[t - 1])
    assert_close_traj(grad_form, xg)
    assert_close_traj(upd_form, xu)
    assert (grad_form[-1] - upd_form[-1]).abs().max() > 1e-3


# -- Taylor --------------------------------------------------------------------------------------

@pytest.mark.parametrize("tau", [1, 2])
def test_taylor_correction_by_hand(tau):
    """ĝ = g + λ g⊙g⊙(x_now − x_stale), x(t+1) = x(t) − η ĝ, g = h x(t−τ), x_now = x(t)."""
    lam = 0.7
    got, _ = run_quadratic(20, delay=tau, correction="taylor", taylor_lambda=lam)
    x = [X0.clone()]
    for t in range(20):
        if t < tau:
            x.append(x[t].clone())
            continue
        g = H * x[t - tau]
        g_hat = g + lam * g * g * (x[t] - x[t - tau])
        x.append(x[t].add(g_hat, alpha=-ETA))
    assert_equal_traj(got, x)
    plain, _ = run_quadratic(20, delay=tau)
    assert not torch.equal(got[-1], plain[-1])


# -- synchronous start / cooldown -------------------------------------------------------------

def test_sync_start_and_cooldown_switches_by_hand():
    """τ = 1, sync_start = 3, sync_cooldown = 3, T = 12.

    t < 3: synchronous.  t = 3: the delay switches on; g(3) is queued, nothing is applied
    (pipeline refill), x(4) = x(3).  4 ≤ t < 9: x(t+1) = x(t) − ηh x(t−1).  t = 9: cooldown;
    the pending g(8) is applied first, then the fresh g(9) (computed at x(9)) on the moved
    weights: x(10) = x(9) − ηh x(8) − ηh x(9).  t ≥ 10: synchronous."""
    got, opt = run_quadratic(12, delay=1, sync_start=3, sync_cooldown=3, total_steps=12)
    x = [X0.clone()]
    for t in range(12):
        if t < 3 or t >= 10:
            x.append(x[t].add(H * x[t], alpha=-ETA))
        elif t == 3:
            x.append(x[t].clone())
        elif t < 9:
            x.append(x[t].add(H * x[t - 1], alpha=-ETA))
        else:  # t == 9
            x.append(x[t].add(H * x[t - 1], alpha=-ETA).add(H * x[t], alpha=-ETA))
    assert_equal_traj(got, x)
    assert opt.pending() == 0 and opt.flush() == 0


def _count_run(steps, delays, sync_start, sync_cooldown, formulation, correction, lr=0.05):
    """AdamW over two groups + SGD on a linear loss; returns (AdamW step counts per group,
    SGD final weights, expected final weights if every gradient were applied once)."""
    a, b = (torch.nn.Parameter(torch.zeros(3, dtype=F64)) for _ in range(2))
    adam = DelayedOptimizer(torch.optim.AdamW([{"params": [a]}, {"params": [b]}]),
                            delay=delays, correction=correction, formulation=formulation,
                            sync_start=sync_start, sync_cooldown=sync_cooldown,
                            total_steps=steps)
    c = torch.tensor([0.5, -1.0, 2.0], dtype=F64)
    y = torch.nn.Parameter(torch.zeros(3, dtype=F64))
    sgd = DelayedOptimizer(torch.optim.SGD([y], lr=lr), delay=delays[0],
                           formulation=formulation, sync_start=sync_start,
                           sync_cooldown=sync_cooldown, total_steps=steps)
    for _ in range(steps):
        a.grad, b.grad, y.grad = torch.ones(3, dtype=F64), torch.ones(3, dtype=F64), c.clone()
        adam.step()
        sgd.step()
    adam.flush()
    sgd.flush()
    counts = [int(adam.optimizer.state[p]["step"]) for p in (a, b)]
    return counts, y.detach(), -steps * lr * c


@pytest.mark.parametrize("formulation", ["gradient", "update"])
def test_switches_drop_nothing(formulation):
    counts, y, expected = _count_run(14, [2, 1], 3, 4, formulation, "none")
    assert counts == [14, 14]
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-14)


@given(steps=st.integers(1, 14), d0=st.integers(0, 3), d1=st.integers(0, 3),
       sync_start=st.integers(0, 5), sync_cooldown=st.integers(0, 5),
       formulation=st.sampled_from(["gradient", "update"]),
       correction=st.sampled_from(["none", "ef", "taylor"]))
@PROPS
def test_every_gradient_applied_once_property(steps, d0, d1, sync_start, sync_cooldown,
                                              formulation, correction):
    if correction == "taylor" and formulation == "update":
        correction = "ef"
    counts, y, expected = _count_run(steps, [d0, d1], sync_start, sync_cooldown, formulation,
                                     correction)
    assert counts == [steps, steps]
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-14)


def test_cooldown_call_performs_pending_plus_one_steps():
    a = torch.nn.Parameter(torch.zeros(2, dtype=F64))
    opt = DelayedOptimizer(torch.optim.AdamW([a]), delay=2, sync_cooldown=2, total_steps=6)
    steps_after = []
    for _ in range(6):
        a.grad = torch.ones(2, dtype=F64)
        opt.step()
        steps_after.append(int(opt.optimizer.state[a]["step"]) if opt.optimizer.state else 0)
    # t=0,1 fill; t=2,3 apply one each; t=4 drains 2 pending + the fresh one; t=5 synchronous.
    assert steps_after == [0, 0, 1, 2, 5, 6]


# -- the pipeline's entry point ----------------------------------------------------------------

@pytest.mark.parametrize("correction", ["none", "ef", "taylor"])
@pytest.mark.parametrize("tau", [1, 2])
def test_apply_stale_matches_step(correction, tau):
    """The executor path (gradient computed on the stale weights it kept, then apply_stale)
    reproduces DelayedOptimizer.step bit for bit."""
    def grad_at(w):
        return w**3 - torch.sin(w)  # a non-quadratic f, gradient elementwise

    w0 = torch.tensor([0.9, -0.4, 1.3], dtype=F64)
    x = torch.nn.Parameter(w0.clone())
    ref = DelayedOptimizer(torch.optim.AdamW([x], lr=0.05, weight_decay=0.1), delay=tau,
                           correction=correction, taylor_lambda=0.5)
    y = torch.nn.Parameter(w0.clone())
    exe = DelayedOptimizer(torch.optim.AdamW([y], lr=0.05, weight_decay=0.1), delay=tau,
                           correction=correction, taylor_lambda=0.5)
    versions = [y.detach().clone()]
    for t in range(15):
        x.grad = grad_at(x.detach())
        ref.step()
        if t >= tau:
            stale = versions[t - tau]
            y.grad = grad_at(stale)
            exe.apply_stale(tau, stale_params=[[stale]])
        versions.append(y.detach().clone())
        assert torch.equal(x, y), t


def test_cooldown_drains_oldest_first():
    """SGD with momentum makes the order visible: with τ = 2 and a cooldown from t = 4, the
    gradients are applied in the order g(0), g(1), ..., g(5) (t=4 applies g(2), g(3), g(4))."""
    mu, lr = 0.5, 0.1
    x = torch.nn.Parameter(torch.zeros(1, dtype=F64))
    opt = DelayedOptimizer(torch.optim.SGD([x], lr=lr, momentum=mu), delay=2,
                           sync_cooldown=2, total_steps=6)
    grads = [torch.tensor([float(3**t)], dtype=F64) for t in range(6)]
    for g in grads:
        x.grad = g.clone()
        opt.step()
    ref, buf = torch.zeros(1, dtype=F64), None
    for g in grads:
        buf = g.clone() if buf is None else buf * mu + g
        ref = ref.add(buf, alpha=-lr)
    assert torch.equal(x.detach(), ref)


def test_error_feedback_across_switches_by_hand():
    """τ = 1, EF, sync_start = 2, sync_cooldown = 2, T = 10; u(t) = ηh x(t−1) is the update
    applied at step t, and the EF memory is 0 at the start of the delayed phase:
    t < 2 synchronous; x(3) = x(2); 3 ≤ t ≤ 7: x(t+1) = x(t) − 2u(t) + u(t−1) with u(2) = 0;
    t = 8: drain g(7) with EF, then the fresh g(8) plainly: x(9) = x(8) − 2u(8) + u(7) − ηh x(8);
    t = 9 synchronous."""
    got, opt = run_quadratic(10, delay=1, correction="ef", sync_start=2, sync_cooldown=2,
                             total_steps=10)
    x, u = [X0.clone()], {2: torch.zeros_like(X0)}
    for t in range(10):
        if t < 2 or t == 9:
            x.append(x[t] - ETA * H * x[t])
        elif t == 2:
            x.append(x[t].clone())
        else:
            u[t] = ETA * H * x[t - 1]
            nxt = x[t] - 2 * u[t] + u[t - 1]
            x.append(nxt - ETA * H * x[t] if t == 8 else nxt)
    assert_close_traj(got, x)
    assert opt.prev_update == [None]


# -- EF(γ) ---------------------------------------------------------------------------------------

def ef_gamma_reference(steps, tau, gamma, momentum=0.0, h=H, x0=X0, lr=ETA):
    """EF(γ): x(t+1) = x(t) − (1+γ)u(t−τ) + γ u(t−τ−1), u(<0) = 0, u(s) SGD's update for
    g(s) = h x(s) (with momentum: b(s) = μ b(s−1) + g(s), b(0) = g(0), u = η b)."""
    x, u_prev, buf = [x0.clone()], torch.zeros_like(x0), None
    for t in range(steps):
        if t < tau:
            x.append(x[t].clone())
            continue
        g = h * x[t - tau]
        buf = g.clone() if buf is None else buf * momentum + g
        u = lr * buf
        x.append(x[t] - (1 + gamma) * u + gamma * u_prev)
        u_prev = u
    return x


@pytest.mark.parametrize("tau", [1, 2, 3])
@pytest.mark.parametrize("gamma", [0.5, 1.7, 3.0])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_ef_gamma_recursion(tau, gamma, momentum):
    got, opt = run_quadratic(30, delay=tau, correction="ef", ef_gamma=gamma,
                             sgd={"momentum": momentum})
    assert opt.ef_gammas == (gamma,)
    assert_close_traj(got, ef_gamma_reference(30, tau, gamma, momentum))


def test_ef_gamma_delay_one_hand_expansion():
    """τ = 1, SGD, γ = 0.4: x(1) = x(0), x(2) = x(1) − 1.4ηh x(0),
    x(t+1) = x(t) − 1.4ηh x(t−1) + 0.4ηh x(t−2)."""
    gam = 0.4
    got, _ = run_quadratic(20, delay=1, correction="ef", ef_gamma=gam)
    x = [X0.clone(), X0.clone(), X0 - (1 + gam) * ETA * H * X0]
    for t in range(2, 20):
        x.append(x[t] - (1 + gam) * ETA * H * x[t - 1] + gam * ETA * H * x[t - 2])
    assert_close_traj(got, x)


@given(tau=st.integers(1, 3), steps=st.integers(1, 14), eta=st.floats(0.01, 0.4),
       gamma=st.one_of(st.floats(0.0, 4.0), st.sampled_from([0.0, 1.0, 2.0, 3.0])),
       momentum=st.sampled_from([0.0, 0.5, 0.9]))
@PROPS
def test_ef_gamma_property(tau, steps, eta, gamma, momentum):
    got, _ = run_quadratic(steps, lr=eta, delay=tau, correction="ef", ef_gamma=gamma,
                           sgd={"momentum": momentum})
    assert_close_traj(got, ef_gamma_reference(steps, tau, gamma, momentum, lr=eta))


def paper_ef_reference(steps, tau, momentum, lr=ETA):
    """The paper's EF with the delay core's own operation order (x ← x_opt − u + u_prev, with
    x_opt = x − η b from torch SGD and u = x − x_opt), so that γ = 1 is compared bit for bit."""
    x = torch.nn.Parameter(X0.clone())
    opt = torch.optim.SGD([x], lr=lr, momentum=momentum)
    traj, pending, u_prev = [x.detach().clone()], [], None
    for t in range(steps):
        pending.append(H * x.detach())
        if t >= tau:
            with torch.no_grad():
                before = x.detach().clone()
                x.grad = pending.pop(0)
                opt.step()
                u = before - x.detach()
                x.sub_(u)
                if u_prev is not None:
                    x.add_(u_prev)
                u_prev = u
        traj.append(x.detach().clone())
    return traj


@pytest.mark.parametrize("tau", [1, 2])
@pytest.mark.parametrize("gamma", [1, 1.0, "list"])
def test_ef_gamma_one_is_the_paper_ef_bit_for_bit(tau, gamma):
    gam = [1.0] if gamma == "list" else gamma
    got, _ = run_quadratic(30, delay=tau, correction="ef", ef_gamma=gam,
                           sgd={"momentum": 0.9})
    assert_equal_traj(got, paper_ef_reference(30, tau, 0.9))
    default, _ = run_quadratic(30, delay=tau, correction="ef", sgd={"momentum": 0.9})
    assert_equal_traj(got, default)


@pytest.mark.parametrize("name", ["adamw", "muon"])
@pytest.mark.parametrize("formulation", ["gradient", "update"])
def test_ef_gamma_one_equals_default_on_a_model(name, formulation):
    data = torch.randn(16, 6, generator=torch.Generator().manual_seed(1))
    target = torch.randn(16, 3, generator=torch.Generator().manual_seed(2))
    runs = []
    for kw in ({}, {"ef_gamma": 1.0}, {"ef_gamma": "auto"}):
        model = _model()
        opt = build_optimizer(name, model.named_parameters(), lr=0.01, weight_decay=0.1)
        if kw.get("ef_gamma") == "auto":
            kw = {"ef_gamma": [1.0] * len(opt.param_groups)}
        d = DelayedOptimizer(opt, delay=1, correction="ef", formulation=formulation, **kw)
        for _ in range(12):
            d.zero_grad()
            torch.nn.functional.mse_loss(model(data), target).backward()
            d.step()
        runs.append([p.detach().clone() for p in model.parameters()])
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)


@pytest.mark.parametrize("tau", [1, 2])
@pytest.mark.parametrize("formulation", ["gradient", "update"])
def test_ef_gamma_zero_is_no_correction_bit_for_bit(tau, formulation):
    kw = dict(delay=tau, formulation=formulation, sgd={"momentum": 0.9}, flush=True)
    zero, _ = run_quadratic(25, correction="ef", ef_gamma=0.0, **kw)
    none, _ = run_quadratic(25, correction="none", **kw)
    assert_equal_traj(zero, none)


@pytest.mark.parametrize("tau", [1, 2])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_ef_gamma_formulations_agree(tau, momentum):
    kw = dict(delay=tau, correction="ef", ef_gamma=2.3, sgd={"momentum": momentum},
              flush=True)
    grad_form, _ = run_quadratic(25, formulation="gradient", **kw)
    upd_form, _ = run_quadratic(25, formulation="update", **kw)
    assert_close_traj(upd_form, grad_form)


def test_ef_gamma_per_group():
    """PipeDream-like: group 0 has τ = 2 with γ = 2.5, group 1 τ = 1 with γ = 0.7; each follows
    its own EF(γ) recursion."""
    h0, h1 = H[:2], H[1:]
    a = torch.nn.Parameter(X0[:2].clone())
    b = torch.nn.Parameter(X0[1:].clone())
    opt = DelayedOptimizer(torch.optim.SGD([{"params": [a]}, {"params": [b]}], lr=ETA,
                                           momentum=0.5),
                           delay=[2, 1], correction="ef", ef_gamma=[2.5, 0.7])
    ta, tb = [a.detach().clone()], [b.detach().clone()]
    for _ in range(25):
        a.grad = h0 * a.detach()
        b.grad = h1 * b.detach()
        opt.step()
        ta.append(a.detach().clone())
        tb.append(b.detach().clone())
    assert_close_traj(ta, ef_gamma_reference(25, 2, 2.5, 0.5, h=h0, x0=X0[:2]))
    assert_close_traj(tb, ef_gamma_reference(25, 1, 0.7, 0.5, h=h1, x0=X0[1:]))


@pytest.mark.parametrize("tau", [1, 2])
@pytest.mark.parametrize("gamma", [0.0, 0.6, 2.2])
def test_apply_stale_matches_step_ef_gamma(tau, gamma):
    """The executor path honours γ: apply_stale reproduces step() bit for bit for γ ≠ 1."""
    def grad_at(w):
        return w**3 - torch.sin(w)

    w0 = torch.tensor([0.9, -0.4, 1.3], dtype=F64)
    x = torch.nn.Parameter(w0.clone())
    ref = DelayedOptimizer(torch.optim.AdamW([x], lr=0.05, weight_decay=0.1), delay=tau,
                           correction="ef", ef_gamma=gamma)
    y = torch.nn.Parameter(w0.clone())
    exe = DelayedOptimizer(torch.optim.AdamW([y], lr=0.05, weight_decay=0.1), delay=tau,
                           correction="ef", ef_gamma=gamma)
    versions = [y.detach().clone()]
    for t in range(15):
        x.grad = grad_at(x.detach())
        ref.step()
        if t >= tau:
            y.grad = grad_at(versions[t - tau])
            exe.apply_stale(tau)
        versions.append(y.detach().clone())
        assert torch.equal(x, y), t


def test_ef_gamma_auto_reads_beta_per_group():
    """auto: γ*(β, τ) per group, β from ``momentum`` (SGD, Muon matrices) or ``betas[0]``
    (Muon's AdamW groups, AdamW); τ = 0 groups get 0; τ = 1 gives 2β/(2−β)²."""
    from asyncpp.delay import optimal_ef_gamma
    from asyncpp.optim import Muon

    w = torch.nn.Parameter(torch.zeros(3, 3, dtype=F64))
    v = torch.nn.Parameter(torch.zeros(3, dtype=F64))
    u = torch.nn.Parameter(torch.zeros(3, dtype=F64))
    sgd = torch.optim.SGD([{"params": [w], "momentum": 0.9}, {"params": [v], "momentum": 0.5},
                           {"params": [u], "momentum": 0.0}], lr=0.1)
    d = DelayedOptimizer(sgd, delay=[1, 2, 0], correction="ef", ef_gamma="auto")
    assert d.ef_gammas[0] == pytest.approx(2 * 0.9 / 1.1**2, rel=1e-15)
    assert d.ef_gammas[1] == optimal_ef_gamma(0.5, 2) and d.ef_gammas[2] == 0.0
    muon = Muon([{"params": [w]}, {"params": [v], "use_muon": False}], lr=0.02, momentum=0.95,
                adamw_betas=(0.8, 0.95))
    d = DelayedOptimizer(muon, delay=1, correction="ef", ef_gamma="AUTO")
    assert d.ef_gammas == pytest.approx((2 * 0.95 / 1.05**2, 2 * 0.8 / 1.2**2), rel=1e-15)
    adamw = torch.optim.AdamW([v], betas=(0.9, 0.99))
    d = DelayedOptimizer(adamw, delay=1, correction="ef", ef_gamma="auto")
    assert d.ef_gammas == pytest.approx((2 * 0.9 / 1.1**2,), rel=1e-15)
