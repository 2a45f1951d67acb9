"""Numeric self-checks of T3 (``theory.stability``): characteristic polynomials against the
state matrices, the Schur–Cohn criterion against numpy roots, the closed-form critical steps
against the root locus and against a direct float64 simulation of the recursion."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from theory import stability as T3
from theory.assumptions import c, z
from verify.profiles import examples

CASES = [(0, False), (1, False), (2, False), (1, True), (2, True)]
BETAS = [0.0, 0.3, 0.6, 0.9]


@pytest.mark.parametrize("tau,ef", CASES + [(3, False), (3, True), (4, True)])
def test_char_poly_is_det_of_state_matrix(tau, ef):
    for beta in (sp.Rational(0), sp.Rational(1, 3), sp.Rational(9, 10)):
        P = T3.char_poly(beta, tau, ef).as_expr()
        A = T3.state_matrix(beta, tau, ef)
        lam = sp.Symbol("lam")
        det = A.charpoly(lam).as_expr().subs(lam, z)
        extra = (tau + 2) - sp.degree(P, z)
        assert sp.expand(det - z**extra * P) == 0


def test_char_poly_api():
    P = T3.char_poly(0.5, 1, ef=True)
    assert isinstance(P, sp.Poly) and P.gens == (z,)
    assert c in P.free_symbols
    assert P.degree() == 3
    with pytest.raises(ValueError, match="beta"):
        T3.char_poly(1.0, 1)
    with pytest.raises(ValueError, match="tau"):
        T3.critical_step(0.5, -1)


def test_schur_cohn_matches_roots():
    rng = np.random.default_rng(0)
    for tau, ef in CASES:
        for _ in range(20):
            beta = sp.Rational(int(rng.integers(0, 99)), 100)
            cv = sp.Rational(int(rng.integers(1, 300)), 100)
            deltas = T3.schur_cohn(T3.char_poly_expr(beta, tau, ef).subs(c, cv))
            sc = all(d > 0 for d in deltas)
            rad = T3.spectral_radius(float(beta), float(cv), tau, ef)
            if abs(rad - 1) > 1e-9:
                assert sc == (rad < 1), (tau, ef, beta, cv)


@pytest.mark.parametrize("tau,ef", CASES + [(3, False), (3, True), (5, True)])
def test_closed_form_equals_root_locus(tau, ef):
    for beta in BETAS + [0.99]:
        cs = T3.critical_step(beta, tau, ef)
        assert T3.critical_step_numeric(beta, tau, ef) == pytest.approx(cs, rel=1e-7)
        expr = T3.critical_step_expr(tau, ef)
        if expr is not None:
            assert float(expr.subs(T3.beta, beta)) == pytest.approx(cs, rel=1e-12)


@pytest.mark.parametrize("tau,ef", CASES + [(3, True)])
def test_stable_below_and_unstable_above(tau, ef):
    for beta in BETAS:
        cs = T3.critical_step(beta, tau, ef)
        grid = np.linspace(1e-3, 0.999, 60) * cs
        assert all(T3.is_stable(beta, g, tau, ef) for g in grid)
        assert not T3.is_stable(beta, 1.001 * cs, tau, ef)


@pytest.mark.parametrize("tau,ef", CASES)
def test_simulation_converges_at_095_and_diverges_at_105(tau, ef):
    for beta in BETAS:
        inst = T3.tightness_instance(beta, tau, ef)
        n = inst["steps"]
        lo = T3.simulate(beta, inst["eta_stable"], tau, ef, steps=n)
        hi = T3.simulate(beta, inst["eta_unstable"], tau, ef, steps=n)
        assert abs(lo[-1]) < 1e-4, (tau, ef, beta, lo[-1])
        assert np.max(np.abs(hi[-2 * (tau + 2):])) > 1e3, (tau, ef, beta, hi[-1])


def test_known_values_and_mechanism():
    assert T3.critical_step(0.0, 0) == pytest.approx(2.0)
    assert T3.critical_step(0.9, 0) == pytest.approx(38.0)
    for beta in BETAS:
        assert T3.critical_step(beta, 1) == 1.0
    golden = (np.sqrt(5) - 1) / 2
    assert T3.critical_step(0.0, 2) == pytest.approx(golden)
    assert T3.critical_step(0.0, 1, ef=True) == pytest.approx(golden)
    assert T3.critical_step(0.0, 2, ef=True) == pytest.approx(0.5320888862)
    # EF makes the stable range grow with momentum; without EF it does not
    ef1 = [T3.critical_step(b, 1, True) for b in BETAS]
    assert all(x < y for x, y in zip(ef1, ef1[1:]))
    no1 = [T3.critical_step(b, 2, False) for b in BETAS]
    assert all(x > y for x, y in zip(no1, no1[1:]))
    assert T3.critical_step(0.99, 1, True) > 9 * T3.critical_step(0.99, 1, False)
    # EF with tau = 0 is the plain method
    assert T3.critical_step(0.5, 0, True) == T3.critical_step(0.5, 0, False)


def test_matrix_quadratic_decouples():
    beta, tau, ef = 0.8, 1, True
    cs = T3.critical_step(beta, tau, ef)
    hs = np.array([0.1, 1.0, 2.0])
    for factor, stable in ((0.97, True), (1.03, False)):
        eta = factor * cs / hs.max()
        finals = [T3.simulate(beta, eta * h, tau, ef, steps=4000)[-1] for h in hs]
        assert (max(abs(f) for f in finals) < 1e-3) == stable


def test_simulate_matches_the_production_delay_core():
    torch = pytest.importorskip("torch")
    from asyncpp.delay import DelayedOptimizer

    for tau, ef, beta, cv in [(0, False, 0.6, 3.0), (1, True, 0.9, 2.0), (2, False, 0.5, 0.4),
                              (2, True, 0.3, 0.5)]:
        x = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.SGD([x], lr=cv, momentum=beta, dampening=beta)
        d = DelayedOptimizer(opt, delay=tau, correction="ef" if ef else "none")
        xs = [x.item()]
        for _ in range(60):
            opt.zero_grad()
            (0.5 * x**2).sum().backward()
            d.step()
            xs.append(x.item())
        sim = T3.simulate(beta, cv, tau, ef, steps=60, init="first")
        assert np.max(np.abs(np.array(xs) - sim)) < 1e-12


@pytest.mark.parametrize("tau,ef", CASES)
def test_result_numeric_callable(tau, ef):
    res = T3.result(tau, ef)
    fn = res.numeric()
    for beta in BETAS:
        if res.params == (T3.beta,):
            assert float(fn(beta)) == pytest.approx(T3.critical_step(beta, tau, ef), rel=1e-12)
        else:  # (tau=2, EF): phi(p*) = 0 at p* = c*(1 - beta)
            pstar = T3.critical_step(beta, tau, ef) * (1 - beta)
            assert abs(float(fn(pstar, beta))) < 1e-12


# -- EF(γ): x_{t+1} = x_t − (1+γ)u_t + γu_{t−1} ---------------------------------------------------

GAMMAS = [0.0, 0.3, 1.0, 1.5, 2.0, 3.0, 5.0]


@pytest.mark.parametrize("tau", [1, 2, 3])
def test_ef_gamma_char_poly_is_det_of_state_matrix(tau):
    for beta in (sp.Rational(0), sp.Rational(9, 10)):
        for gamma in (sp.Rational(0), sp.Rational(7, 3), sp.Symbol("g")):
            P = T3.char_poly(beta, tau, True, gamma=gamma).as_expr()
            A = T3.state_matrix(beta, tau, True, gamma=gamma)
            lam = sp.Symbol("lam")
            det = A.charpoly(lam).as_expr().subs(lam, z)
            extra = (tau + 2) - sp.degree(P, z)
            assert sp.expand(det - z**extra * P) == 0


def test_ef_gamma_api_and_bad_input():
    P = T3.char_poly(0.5, 1, ef=True, gamma=2)
    assert P.degree() == 3 and c in P.free_symbols
    assert T3.critical_step(0.9, 1, True, gamma=1.0) == T3.critical_step(0.9, 1, True)
    assert T3.critical_step(0.9, 2, True, gamma=0.0) == T3.critical_step(0.9, 2, False)
    with pytest.raises(ValueError, match="needs ef=True"):
        T3.critical_step(0.5, 1, False, gamma=2.0)
    for bad in (-0.1, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="gamma"):
            T3.critical_step(0.5, 1, True, gamma=bad)


@pytest.mark.parametrize("tau", [1, 2, 3])
def test_ef_gamma_closed_form_and_root_locus_and_stability(tau):
    for beta in BETAS + [0.95, 0.99]:
        for gamma in GAMMAS:
            cs = T3.critical_step(beta, tau, True, gamma=gamma)
            assert T3.critical_step_numeric(beta, tau, True, gamma=gamma) == pytest.approx(
                cs, rel=1e-7), (beta, gamma)
            if tau == 1 and gamma > 0:  # (at γ = 0, p_g = ∞ and the Min is p_f)
                expr = T3.critical_step_gamma_expr()
                val = float(expr.subs({T3.beta: beta, T3.gamma_sym: gamma}))
                assert val == pytest.approx(cs, rel=1e-12)
            grid = np.linspace(1e-3, 0.999, 40) * cs
            assert all(T3.is_stable(beta, g, tau, True, gamma=gamma) for g in grid)
            assert not T3.is_stable(beta, 1.001 * cs, tau, True, gamma=gamma)


@pytest.mark.parametrize("tau", [1, 2])
def test_ef_gamma_simulation_converges_at_095_and_diverges_at_105(tau):
    for beta in (0.0, 0.6, 0.9):
        for gamma in (0.5, 2.0, T3.optimal_gamma(beta, tau)[0]):
            inst = T3.tightness_instance(beta, tau, True, gamma=gamma)
            n = inst["steps"]
            lo = T3.simulate(beta, inst["eta_stable"], tau, True, steps=n, gamma=gamma)
            hi = T3.simulate(beta, inst["eta_unstable"], tau, True, steps=n, gamma=gamma)
            assert abs(lo[-1]) < 1e-4, (tau, beta, gamma, lo[-1])
            assert np.max(np.abs(hi[-2 * (tau + 2):])) > 1e3, (tau, beta, gamma, hi[-1])


def test_ef_gamma_simulate_matches_the_production_delay_core():
    torch = pytest.importorskip("torch")
    from asyncpp.delay import DelayedOptimizer

    for tau, beta, cv, gamma in [(1, 0.9, 2.0, 1.7), (2, 0.5, 0.4, 0.6), (3, 0.95, 0.5, 4.1)]:
        x = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.SGD([x], lr=cv, momentum=beta, dampening=beta)
        d = DelayedOptimizer(opt, delay=tau, correction="ef", ef_gamma=gamma)
        xs = [x.item()]
        for _ in range(60):
            opt.zero_grad()
            (0.5 * x**2).sum().backward()
            d.step()
            xs.append(x.item())
        sim = T3.simulate(beta, cv, tau, True, steps=60, init="first", gamma=gamma)
        assert np.max(np.abs(np.array(xs) - sim)) < 1e-12


def test_optimal_gamma_tau1_closed_form():
    for beta in BETAS + [0.95, 0.98, 0.99]:
        g, cs = T3.optimal_gamma(beta, 1)
        assert g == pytest.approx(2 * beta / (2 - beta) ** 2, rel=1e-15)
        assert cs == pytest.approx((2 - beta) ** 2 / (4 * (1 - beta)), rel=1e-15)
        assert T3.critical_step(beta, 1, True, gamma=g) == pytest.approx(cs, rel=1e-12)
        # no γ on a fine grid beats it (the proof says: none at all)
        grid = np.linspace(0.0, 8.0, 801)
        assert max(T3.critical_step(beta, 1, True, gamma=x) for x in grid) <= cs * (1 + 1e-12)
        # numeric maximisation finds the same maximiser
        gn, pn = T3._maximise_p(beta, 1)
        assert gn == pytest.approx(g, abs=1e-6) and pn / (1 - beta) == pytest.approx(cs, 1e-9)
    # the headline numbers
    assert T3.optimal_gamma(0.9, 1) == pytest.approx((1.8 / 1.21, 1.21 / 0.4), rel=1e-12)
    assert T3.optimal_gamma(0.99, 1) == pytest.approx((1.98 / 1.0201, 1.0201 / 0.04), rel=1e-12)


@pytest.mark.parametrize("tau", [1, 2, 3])
def test_optimal_gamma_is_certified(tau):
    """No real γ is stable at 1e-6 above the claimed optimum; γ* is stable just below it."""
    for beta in (0.0, 0.5, 0.9, 0.99):
        cert = T3.certify_optimal_gamma(beta, tau)
        assert cert["certified"], cert
        g, cs = cert["gamma_star"], cert["c_star"]
        assert T3.critical_step(beta, tau, True, gamma=g) == pytest.approx(cs, rel=1e-12)
        # EF(γ*) is at least as stable as the paper's EF and no correction
        assert cs >= T3.critical_step(beta, tau, True) * (1 - 1e-12)
        assert cs >= T3.critical_step(beta, tau, False) * (1 - 1e-12)


def test_product_auto_gamma_agrees_with_theory():
    from asyncpp.delay import critical_p, optimal_ef_gamma

    for tau in (1, 2, 3):
        for beta in (0.0, 0.5, 0.9, 0.95, 0.99):
            g_th, c_th = T3.optimal_gamma(beta, tau)
            g_pr = optimal_ef_gamma(beta, tau)
            assert g_pr == pytest.approx(g_th, abs=1e-12), (tau, beta)
            assert critical_p(beta, tau, g_pr) / (1 - beta) == pytest.approx(c_th, rel=1e-9)


# ------------------------------------------------------------ EF(γ*) closed form, every τ
CF_TAUS = (1, 2, 3, 4, 5, 6)
CF_BETAS = [*np.round(np.linspace(0.0, 0.98, 50), 6), 0.99, 0.995, 0.999, 0.9999]


def _search_gamma(beta, tau, pstar, eps=1e-8):
    """γ* by numbers alone: the midpoint of the interval of stabilising γ at p = (1−eps)p*
    (D-decomposition in γ); the interval shrinks to γ* as eps → 0 with its midpoint off by
    O(eps), while the root-locus maximisation is flat there (γ only to ~1e-6)."""
    ivs = T3.stabilising_gammas(beta, tau, (1 - eps) * pstar)
    assert len(ivs) == 1, (beta, tau, ivs)
    lo, hi = ivs[0]
    return 0.5 * (lo + hi), hi - lo


def test_closed_form_product_matches_theory_exactly():
    """src (float bisection on the trigonometric form) against theory (sympy's exact roots of
    π_τ' at the rational β, 30 digits): τ = 1..6 over a 54-point β grid."""
    from asyncpp.delay.ef_gamma import optimal_ef_critical_step, optimal_ef_gamma
    from theory import ef_gamma_closed as EG

    worst_g = worst_c = 0.0
    for tau in CF_TAUS:
        for beta in CF_BETAS:
            _, ps, gs = EG.lobe_maximum(sp.Rational(str(beta)), tau)
            worst_g = max(worst_g, abs(optimal_ef_gamma(float(beta), tau) - gs))
            worst_c = max(worst_c, abs(optimal_ef_critical_step(float(beta), tau) * (1 - beta)
                                       / ps - 1))
    assert worst_g < 1e-10 and worst_c < 1e-12, (worst_g, worst_c)


@pytest.mark.parametrize("tau", CF_TAUS)
def test_closed_form_matches_the_numeric_search(tau):
    """The closed form against two numeric determinations that do not use it: c* against the
    root-locus maximisation over γ (``optimal_gamma_search``, to 1e-9), γ* against the
    midpoint of the stabilising γ interval just below the edge (to 1e-6), and the root locus
    at the closed-form γ* attains p*."""
    from asyncpp.delay import critical_p
    from asyncpp.delay.ef_gamma import optimal_ef_critical_step, optimal_ef_gamma

    for beta in CF_BETAS[::4] + [0.95, 0.99, 0.999]:
        g = optimal_ef_gamma(float(beta), tau)
        cs = optimal_ef_critical_step(float(beta), tau)
        g_num, c_num = T3.optimal_gamma_search(beta, tau)
        assert cs == pytest.approx(c_num, rel=1e-9), (tau, beta)
        assert g == pytest.approx(g_num, abs=2e-5), (tau, beta)  # the search is flat in γ
        g_mid, width = _search_gamma(beta, tau, cs * (1 - beta))
        assert abs(g - g_mid) < 1e-6 and width < 1e-2, (tau, beta, g, g_mid, width)
        assert critical_p(beta, tau, g) == pytest.approx(cs * (1 - beta), rel=1e-9)


@pytest.mark.parametrize("tau", [2, 3, 4, 5, 6])
@examples(6)
@given(beta=st.one_of(st.floats(0.0, 0.999), st.sampled_from([0.0, 0.9, 0.95, 0.99])))
def test_closed_form_is_the_maximum_over_all_gamma(tau, beta):
    """For every drawn β: no real γ is stable 1e-6 above the closed-form edge
    (D-decomposition), γ* is stable just below it, and moving γ off γ* lowers the edge."""
    from asyncpp.delay import critical_p

    cert = T3.certify_optimal_gamma(beta, tau)
    assert cert["certified"], cert
    g, cs = cert["gamma_star"], cert["c_star"]
    assert critical_p(beta, tau, g) == pytest.approx(cs * (1 - beta), rel=1e-8)
    for dg in (-1e-2, 1e-2):
        assert critical_p(beta, tau, max(0.0, g + dg * (1 + g))) < cs * (1 - beta)


@examples(10)
@given(tau=st.integers(1, 32),
       beta=st.one_of(st.floats(0.0, 0.999), st.sampled_from([0.0, 0.9, 0.99, 0.999])))
def test_closed_form_for_deep_pipelines(tau, beta):
    """For every drawn (τ ≤ 32, β): the product's bisection and the theory's Chebyshev-series
    roots agree (1e-9), the root locus at γ* attains p* (1e-8), and γ* ± 1e-3·(1+γ*) stays
    below it (the flat top of c*(γ) is at γ*)."""
    from asyncpp.delay import critical_p
    from asyncpp.delay.ef_gamma import optimal_ef_critical_step, optimal_ef_gamma
    from theory import ef_gamma_closed as EG

    g, cs = optimal_ef_gamma(beta, tau), optimal_ef_critical_step(beta, tau)
    _, ps, gs = EG.lobe_maximum_float(beta, tau)
    assert g == pytest.approx(gs, rel=1e-9, abs=1e-9)
    assert cs * (1 - beta) == pytest.approx(ps, rel=1e-9)
    assert critical_p(beta, tau, g) == pytest.approx(ps, rel=1e-8)
    for dg in (-1e-3, 1e-3):
        assert critical_p(beta, tau, max(0.0, g + dg * (1 + g))) < ps * (1 + 1e-12)


def test_exact_certificate_and_its_refusals():
    """``ef_gamma_closed.certify`` (rational arithmetic only) certifies the closed form and
    refuses a γ off by 1e-3 or a p* off by 1e-7 either way."""
    from theory import ef_gamma_closed as EG

    for tau in (1, 2, 3):
        for b in ("0", "1/2", "19/20"):
            cert = EG.certify(sp.Rational(b), tau)
            assert cert["certified"], cert
            g, ps = cert["gamma_star"], cert["p_star"]
            assert not EG.certify(sp.Rational(b), tau, gamma=g + 1e-3)["lower"]
            assert not EG.certify(sp.Rational(b), tau, p_star=ps * (1 - 1e-7))["upper"]
            assert not EG.certify(sp.Rational(b), tau, p_star=ps * (1 + 1e-7))["lower"]


def test_closed_form_tau1_tau2_and_beta_one_limits():
    """τ = 1: u* = (2+β)/4; τ = 2: u* is the larger root of 12u² − (8+4β)u − (1−2β); β → 1:
    K₂ = (4√6−9)/9, γ* → (9+4√6)/5, approached by the product's γ* at β = 1 − 1e-6."""
    from asyncpp.delay.ef_gamma import _lobe_maximum, optimal_ef_critical_step, optimal_ef_gamma

    for beta in (0.0, 0.3, 0.9, 0.99):
        w1, _ = _lobe_maximum(beta, 1)
        assert np.cos(w1) == pytest.approx((2 + beta) / 4, abs=1e-14)
        w2, _ = _lobe_maximum(beta, 2)
        u2 = np.cos(w2)
        assert 12 * u2**2 - (8 + 4 * beta) * u2 - (1 - 2 * beta) == pytest.approx(0, abs=1e-12)
        assert u2 == pytest.approx((2 + beta + np.sqrt(beta**2 - 2 * beta + 7)) / 6, abs=1e-14)
    k2, g2 = (4 * np.sqrt(6) - 9) / 9, (9 + 4 * np.sqrt(6)) / 5
    assert T3.beta_one_limit(2) == pytest.approx((g2, k2), rel=1e-12)
    b = 1 - 1e-6
    assert optimal_ef_gamma(b, 2) == pytest.approx(g2, abs=1e-4)
    assert optimal_ef_critical_step(b, 2) * (1 - b) == pytest.approx(k2, rel=1e-4)
    for tau in (1, 2, 3, 4):
        g_inf, k_inf = T3.beta_one_limit(tau)
        assert optimal_ef_gamma(b, tau) == pytest.approx(g_inf, abs=1e-4 * tau)
        assert optimal_ef_critical_step(b, tau) * (1 - b) == pytest.approx(k_inf, rel=1e-4)


def test_ef_asymptote_is_one_over_sqrt():
    """The paper's EF at τ = 1: c* = 1/√(1−β) − 1/2 + r, 0 ≤ r ≤ √(1−β)/8 (steps SC13–SC14):
    c*√(1−β) → 1, not 1/2."""
    for beta in (0.9, 0.99, 0.999, 0.9999):
        cs = T3.critical_step(beta, 1, True)
        r = cs - (1 / np.sqrt(1 - beta) - 0.5)
        assert 0 <= r <= np.sqrt(1 - beta) / 8
    assert T3.critical_step(0.9999, 1, True) * np.sqrt(1e-4) == pytest.approx(0.995, abs=1e-4)


def test_beta_to_one_asymptotics():
    """γ*(β, 1) → 2 and (1−β)c* → 1/4; for τ ≥ 2 (1−β)c* → K_τ > 0 (the 1/(1−β) growth of
    the synchronous method survives), while the paper's EF (γ = 1 < τ) stays bounded and
    γ = τ grows only like 1/√(1−β). At β = 1 small steps are stable iff γ > τ."""
    for tau in (1, 2, 3):
        g_inf, k_inf = T3.beta_one_limit(tau)
        g, cs = T3.optimal_gamma(1 - 1e-5, tau)
        assert g == pytest.approx(g_inf, abs=1e-3) and cs * 1e-5 == pytest.approx(k_inf, rel=1e-3)
        assert g_inf > tau
        for gamma, stable in ((tau - 0.5, False), (tau + 0.5, True)):
            coeffs = np.polyadd(np.concatenate([[1.0, -2.0, 1.0], np.zeros(tau)]),
                                1e-4 * np.array([1 + gamma, -gamma]))
            assert (np.max(np.abs(np.roots(coeffs))) < 1) == stable
        r1 = T3.critical_step(0.999, tau, True, gamma=tau) / T3.critical_step(0.99, tau, True,
                                                                              gamma=tau)
        assert r1 == pytest.approx(np.sqrt(10), rel=0.05)
    assert T3.critical_step(0.9999, 2, True) < 1.0 and T3.critical_step(0.9999, 3, True) < 0.51


@pytest.mark.parametrize("name", ["T3[tau=1, EF(gamma)]", "T3[tau=1, EF(gamma*)]"])
def test_ef_gamma_result_numeric_callable(name):
    res = {r.name: r for r in T3.ef_gamma_results()}[name]
    fn = res.numeric()
    for beta in BETAS:
        if res.params == (T3.beta,):
            assert float(fn(beta)) == pytest.approx(T3.optimal_gamma(beta, 1)[1], rel=1e-12)
        else:
            for gamma in GAMMAS[1:]:
                assert float(fn(beta, gamma)) == pytest.approx(
                    T3.critical_step(beta, 1, True, gamma=gamma), rel=1e-12)
