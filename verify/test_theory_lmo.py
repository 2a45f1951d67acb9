"""Numeric self-checks of the LMO results of ``theory/`` (T1, T2, T4): the lambdified callables
equal the sympy statements, the τ = 0 reduction to Kovalev, the optimal parameters and the
complexity, the tightness instance (exact), and small numpy simulations of the *modelled*
method on an ℓ∞ problem, so that a wrong theorem would be caught even before ``verify/``'s
properties run the production optimizer."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from theory import delayed_lmo as T1
from theory import error_feedback as T2
from theory import variable_delay as T4
from theory.assumptions import eps as eps_sym
from theory.assumptions import eps1, eps2, rho, sigma

RNG = np.random.default_rng(1234)


def _random_point(params, rng):
    vals = {}
    for sym in params:
        name = sym.name
        if name == "alpha":
            vals[sym] = rng.uniform(0.01, 1.0)
        elif name == "epsilon_2":
            vals[sym] = rng.uniform(0.0, 0.5)
        elif name == "epsilon_1":
            vals[sym] = rng.uniform(0.0, 0.5)
        elif name == "K":
            vals[sym] = float(rng.integers(1, 10_000))
        elif name.startswith("tau"):
            vals[sym] = float(rng.integers(0, 6))
        else:
            vals[sym] = rng.uniform(0.05, 5.0)
    return vals


@pytest.mark.parametrize("res", [T1.result(False), T1.result(True), T2.result(False),
                                 T2.result(True), T4.result(False), T4.result(True)],
                         ids=lambda r: r.name)
def test_lambdified_equals_sympy(res):
    fn = res.numeric()
    for _ in range(5):
        vals = _random_point(res.params, RNG)
        exact = float(res.statement.subs(vals).evalf())
        got = float(fn(*[vals[s] for s in res.params]))
        assert got == pytest.approx(exact, rel=1e-10)


def test_bound_wrappers_match_statements():
    args = dict(Delta=3.0, L=2.0, rho=4.0, sigma=0.5, eta=0.01, alpha=0.1, K=1000)
    b1 = T1.bound(**args, tau=1, eps1=0.1, eps2=0.2, E0=1.5)
    vals = {s: v for s, v in zip(T1.PARAMS, (3.0, 2.0, 4.0, 0.5, 0.01, 0.1, 1000, 1, 0.1, 0.2,
                                             1.5))}
    assert b1 == pytest.approx(float(T1.statement().subs(vals)), rel=1e-12)
    # zero buffer: E0 = sqrt(2 L Delta)
    assert T1.bound(**args, tau=1) == pytest.approx(T1.bound(**args, tau=1, E0=np.sqrt(12.0)))
    # arrays broadcast
    arr = T1.bound(**{**args, "eta": np.array([0.01, 0.02])}, tau=np.array([1, 2]))
    assert arr.shape == (2,)
    # T2 iterate = virtual + L eta r; worst case drift = 2 r
    v = T2.bound(**args, tau=1, drift=0.3, point="virtual")
    it = T2.bound(**args, tau=1, drift=0.3, point="iterate")
    assert it - v == pytest.approx(2.0 * 0.01)
    assert T2.bound(**args, tau=1) == pytest.approx(T2.bound(**args, tau=1, drift=2.0))
    # T2 worst case (virtual) = T1 + C L eta r
    assert T2.bound(**args, tau=1, point="virtual") - T1.bound(**args, tau=1) == \
        pytest.approx(2 * 2.0 * 0.01)
    # T4 with uniform delays is T1
    assert T4.bound(**args, taus=[1, 1, 1]) == pytest.approx(T1.bound(**args, tau=1))
    assert T4.bound(**args, taus=[2, 2], nesterov=True) == pytest.approx(
        T1.bound(**args, tau=2, nesterov=True))


def test_errors_name_the_bad_value():
    args = dict(Delta=1.0, L=1.0, rho=1.0, sigma=1.0, eta=0.1, K=10, tau=1)
    with pytest.raises(ValueError, match="alpha"):
        T1.bound(**args, alpha=1.5)
    with pytest.raises(ValueError, match="eps2"):
        T1.bound(**args, alpha=0.5, eps2=1.0)
    with pytest.raises(ValueError, match="tau >= 1"):
        T2.bound(**{**args, "tau": 0}, alpha=0.5)
    with pytest.raises(ValueError, match="point"):
        T2.bound(**args, alpha=0.5, point="elsewhere")
    with pytest.raises(ValueError, match="taus"):
        T4.effective_delay([])
    with pytest.raises(ValueError, match="P"):
        T4.pipedream_taus(0)


def test_tau0_is_kovalev_form_and_below_kovalev():
    for _ in range(50):
        D, L, rho, sig = RNG.uniform(0.1, 10, size=4)
        eta, a = RNG.uniform(1e-4, 0.1), RNG.uniform(0.01, 1.0)
        K = int(RNG.integers(1, 100_000))
        ours = T1.bound(D, L, rho, sig, eta, a, K, 0, E0=rho * sig)
        kov = T1.kovalev_bound(D, L, rho, sig, eta, a, K)
        assert ours <= kov
        # the gap: 2 rho sigma/K + 3 L eta, plus 2(sqrt(a) - sqrt(a/(2-a))) rho sigma (M13's
        # exact fixed point)
        noise_gap = 2 * (np.sqrt(a) - np.sqrt(a / (2 - a))) * rho * sig
        assert kov - ours == pytest.approx(2 * rho * sig / K + 3 * L * eta + noise_gap,
                                           rel=1e-9)


def test_delay_costs_two_tau_L_eta():
    a = dict(Delta=1.0, L=3.0, rho=2.0, sigma=1.0, eta=1e-3, alpha=0.05, K=500)
    for tau in range(5):
        assert T1.bound(**a, tau=tau) - T1.bound(**a, tau=0) == pytest.approx(2 * tau * 3e-3)
    # relative cost vs the momentum lag 2 L eta (1-alpha)/alpha is alpha tau/(1-alpha)
    lag = 2 * 3.0 * 1e-3 * 0.95 / 0.05
    assert (2 * 3.0 * 1e-3) / lag == pytest.approx(0.05 / 0.95)


def test_optimal_eta_is_the_minimiser():
    for nesterov in (False, True):
        for _ in range(10):
            D, L, rho, sig = RNG.uniform(0.1, 10, size=4)
            a, K, tau = RNG.uniform(0.01, 1.0), int(RNG.integers(10, 10**6)), int(
                RNG.integers(0, 4))
            e = T1.optimal_eta(D, L, a, K, tau, nesterov=nesterov)
            b0 = T1.bound(D, L, rho, sig, e, a, K, tau, nesterov=nesterov)
            for f in (0.9, 0.99, 1.01, 1.1):
                assert b0 <= T1.bound(D, L, rho, sig, e * f, a, K, tau, nesterov=nesterov)


def test_optimal_params_near_grid_optimum():
    D, L, rho, sig = 2.0, 1.0, 3.0, 1.0
    for K in (10**4, 10**6, 10**8):
        for tau in (0, 1, 4):
            e, a = T1.optimal_params(D, L, rho, sig, K, tau)
            ours = T1.bound(D, L, rho, sig, e, a, K, tau)
            grid = np.geomspace(1e-4, 1.0, 400)
            best = min(T1.bound(D, L, rho, sig, T1.optimal_eta(D, L, g, K, tau), g, K, tau)
                       for g in grid)
            assert ours <= 1.25 * best
    # the delay changes alpha* not at all and eta* only at order alpha*tau
    e0, a0 = T1.optimal_params(D, L, rho, sig, 10**8, 0)
    e1, a1 = T1.optimal_params(D, L, rho, sig, 10**8, 1)
    assert a0 == a1
    assert 1 - e1 / e0 < 2 * a0


@pytest.mark.parametrize("nesterov", [False, True])
def test_complexity_reaches_epsilon(nesterov):
    for epsilon in (1.0, 0.3, 0.1):
        for tau in (0, 1, 3):
            out = T1.complexity(epsilon, 2.0, 1.5, 3.0, 0.7, tau, eps1=0.05, eps2=0.1,
                                nesterov=nesterov)
            b = T1.bound(2.0, 1.5, 3.0, 0.7, out["eta"], out["alpha"], out["K"], tau,
                         eps1=0.05, eps2=0.1, nesterov=nesterov)
            assert b <= epsilon * (1 + 1e-12)


def test_complexity_leading_term_is_half_kovalevs():
    # M13's exact fixed point alpha sigma^2/(2 - alpha): 1024 instead of Kovalev's 2048
    D, Lv, rv, sv = 1.0, 1.0, 1.0, 1.0
    for epsilon in (1e-2, 1e-3):
        K = T1.complexity(epsilon, D, Lv, rv, sv, 0, E0=0.0)["K"]
        lead = 1024 * Lv * D * rv**2 * sv**2 / epsilon**4
        assert K == pytest.approx(lead + 16 * Lv * D * 1.5 / epsilon**2, rel=1e-6)
        Kt = T1.complexity(epsilon, D, Lv, rv, sv, 5, E0=0.0)["K"]
        assert (Kt - K) == pytest.approx(16 * Lv * D * 2 * 5 / epsilon**2, rel=1e-3)
    a0 = eps_sym**2 / (64 * rho**2 * sigma**2)
    assert sp.simplify(T1.alpha0_expr().subs({eps1: 0, eps2: 0}) - 2 * a0 / (1 + a0)) == 0


def test_noise_term_is_the_exact_fixed_point():
    # the heavy-ball noise factor sqrt(alpha/(2-alpha)) is below sqrt(alpha), ~ sqrt(alpha/2)
    for a in (1e-4, 1e-2, 0.5, 1.0):
        nu = float(sp.sqrt(sp.Float(a) / (2 - sp.Float(a))))
        assert nu <= np.sqrt(a) + 1e-15
    assert float(sp.sqrt(sp.Float(1e-6) / (2 - sp.Float(1e-6)))) / np.sqrt(1e-6) == \
        pytest.approx(1 / np.sqrt(2), rel=1e-5)


def _sign_descent_exact(tau: int, steps: int) -> list[Fraction]:
    """Exact (rational) sign descent with the production idle start, η = 1, x0 = 1/2."""
    xs = [Fraction(1, 2)]
    for t in range(steps + tau):
        if t < tau:
            xs.append(xs[-1])
            continue
        g = xs[t - tau]
        xs.append(xs[-1] - (1 if g > 0 else -1))
    return xs[tau:]  # y_k = x_{k+tau}


@pytest.mark.parametrize("tau", range(9))
def test_tightness_orbit_exact(tau):
    inst = T1.tightness_instance(L=1.0, eta=1.0, tau=tau, periods=3)
    ys = _sign_descent_exact(tau, inst["K"])[: inst["K"]]
    orbit = np.tile(inst["orbit"], 3)
    assert [float(y) for y in ys] == list(orbit)
    measured = float(sum(abs(y) for y in ys) / len(ys))
    assert measured == pytest.approx((2 * tau**2 + 2 * tau + 1) / (2 * (2 * tau + 1)))
    assert inst["measured"] == pytest.approx(measured)
    assert inst["ratio"] >= 0.25
    if tau >= 1:
        delay_inc = measured - 0.5
        assert delay_inc >= (2 * tau) / 6 - 1e-12


def test_tightness_ratio_tends_to_a_quarter():
    ratios = [T1.tightness_instance(L=2.0, eta=0.1, tau=t, periods=10)["ratio"]
              for t in (0, 1, 10, 100)]
    assert ratios[0] == pytest.approx(0.5 / (0.5 + 1 / (8 * 20)))
    assert all(r >= 0.25 for r in ratios)
    assert ratios[-1] < 0.26


# ---------------------------------------------------------------- modelled-method simulations
def _linf_problem(d, rng):
    h = rng.uniform(0.5, 2.0, size=d)
    return h, float(h.sum()), float(np.sqrt(d))  # f = 1/2 sum h x^2, L(ℓ∞→ℓ1) = sum h, ρ = √d


def _run(h, x0, eta, alpha, tau, K, noise, rng, ef=False, nesterov=False, taus=None):
    """Sign-LMO (ℓ∞ ball) with EMA momentum, production delay semantics; returns the average
    ℓ1 gradient norm at the measured points (iterate, or virtual point for EF)."""
    d = h.size
    taus = np.full(d, tau) if taus is None else np.asarray(taus)
    tmax = int(taus.max())
    T = K + tmax
    xs = [x0.copy()]
    m = np.zeros(d)
    u_prev = np.zeros(d)
    grads = []
    meas = []
    for t in range(T):
        x = xs[-1]
        grads.append(h * x + noise * rng.standard_normal(d))
        active = t >= taus
        idx = np.clip(t - taus, 0, None)
        g = np.array([grads[i][c] for c, i in enumerate(idx)])
        m = np.where(active, (1 - alpha) * m + alpha * g, m)
        v = alpha * g + (1 - alpha) * m if nesterov else m
        u = np.where(active, eta * np.sign(v), 0.0)
        point = x + u_prev if ef else x
        if t >= tmax:
            meas.append(float(np.abs(h * point).sum()))
        xs.append(x - 2 * u + u_prev if ef else x - u)
        u_prev = u if ef else u_prev
    return float(np.mean(meas))


@pytest.mark.parametrize("nesterov", [False, True])
def test_t1_holds_on_modelled_runs(nesterov):
    rng = np.random.default_rng(7)
    h, L, rho = _linf_problem(8, rng)
    x0 = rng.uniform(-2, 2, size=8)
    Delta = 0.5 * float((h * x0**2).sum())
    for tau in (0, 1, 3):
        for alpha in (1.0, 0.1):
            K, eta, noise = 400, 0.01, 0.3
            sigma = noise * np.sqrt(8)
            avg = np.mean([_run(h, x0, eta, alpha, tau, K, noise, rng, nesterov=nesterov)
                           for _ in range(3)])
            b = T1.bound(Delta, L, rho, sigma, eta, alpha, K, tau, nesterov=nesterov)
            assert avg <= b


def test_t2_holds_on_modelled_runs():
    rng = np.random.default_rng(8)
    h, L, rho = _linf_problem(6, rng)
    x0 = rng.uniform(-2, 2, size=6)
    Delta = 0.5 * float((h * x0**2).sum())
    for tau in (1, 2):
        K, eta, alpha, noise = 400, 0.01, 0.2, 0.2
        avg = _run(h, x0, eta, alpha, tau, K, noise, rng, ef=True)
        b = T2.bound(Delta, L, rho, noise * np.sqrt(6), eta, alpha, K, tau, point="virtual")
        assert avg <= b


def test_t4_holds_on_modelled_runs():
    rng = np.random.default_rng(9)
    h, L, rho = _linf_problem(4, rng)
    x0 = rng.uniform(-2, 2, size=4)
    Delta = 0.5 * float((h * x0**2).sum())
    taus = T4.pipedream_taus(4)
    K, eta, alpha, noise = 400, 0.01, 0.2, 0.2
    avg = _run(h, x0, eta, alpha, 0, K, noise, rng, taus=taus)
    b = T4.bound(Delta, L, rho, noise * 2.0, eta, alpha, K, taus)
    w = h / h.sum()  # one coordinate per block: L_s = h_s
    bw = T4.bound(Delta, L, rho, noise * 2.0, eta, alpha, K, taus, weights=w)
    assert avg <= bw <= b


def test_depth_dependence():
    for P in (1, 2, 4, 8, 16):
        assert T4.depth_penalty(P, "2bw") == 1.0
        assert T4.depth_penalty(P, "pipedream") == P - 1
        assert T4.depth_penalty(P, "pipedream", weights=np.ones(P)) == pytest.approx((P - 1) / 2)
    a = dict(Delta=1.0, L=1.0, rho=1.0, sigma=0.1, eta=1e-3, alpha=0.1, K=10**4)
    pd = [T4.bound(**a, taus=T4.pipedream_taus(P)) for P in (2, 4, 8, 16)]
    tb = [T4.bound(**a, taus=T4.twobw_taus(P)) for P in (2, 4, 8, 16)]
    assert all(x < y for x, y in zip(pd, pd[1:]))
    assert all(x == pytest.approx(tb[0]) for x in tb)


def test_measured_drift():
    ups = [np.ones((2, 2)) * 0.1, np.ones((2, 2)) * 0.1, np.ones((2, 2)) * 0.3]
    # k=0: u_-1 - u_-2 = 0; k=1: u_0 - 0 = ||0.1*ones|| = 0.2; k=2: u_1 - u_0 = 0
    assert T2.measured_drift(ups, eta=0.1) == pytest.approx(0.2 / (3 * 0.1))


def test_tightness_instance_matches_production_muon():
    torch = pytest.importorskip("torch")
    from asyncpp.delay import DelayedOptimizer
    from asyncpp.optim import Muon, newton_schulz

    # a 1x1 Muon step is s0 * sign(m), s0 the Newton-Schulz output for a 1x1 input
    s0 = float(newton_schulz(torch.ones(1, 1, dtype=torch.float64), dtype=torch.float64)[0, 0])
    for tau in range(3):
        lr = 0.1
        inst = T1.tightness_instance(L=1.0, eta=lr * s0, tau=tau, periods=2)
        x = torch.nn.Parameter(torch.full((1, 1), inst["x0"], dtype=torch.float64))
        opt = Muon([x], lr=lr, momentum=0.0, nesterov=False, ns_dtype="float64")
        d = DelayedOptimizer(opt, delay=tau)
        xs = []
        for _ in range(inst["K"] + tau):
            xs.append(x.item())
            opt.zero_grad()
            (0.5 * x**2).sum().backward()
            d.step()
        ys = np.array(xs[tau:])
        assert np.max(np.abs(ys - np.tile(inst["orbit"], 2))) < 1e-12
        assert float(np.mean(np.abs(ys))) == pytest.approx(inst["measured"])
