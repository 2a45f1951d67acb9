r"""PEP worst cases of delayed EMA-momentum SGD (:mod:`theory.pep_delay`), pinned to production.

* The PEP's method is production's: on a 1-D quadratic, :func:`theory.pep_delay.run` and
  ``torch.optim.SGD(momentum=β, dampening=β)`` inside ``DelayedOptimizer`` agree in float64.
* The PEP reduces to the known exact worst case of gradient descent (Drori–Teboulle,
  :math:`L R^2/(4Kh + 2)`) and to PEPit's own non-convex gradient-descent example.
* Quadratics are in the class, so the PEP worst case is never below the quadratic one, and the
  PEP edge never above the quadratic edge at the same horizon.
* Production on the PEP's worst-case function: the solution's iterates, gradients and values
  are interpolated by an L-smooth convex function defined everywhere
  (:class:`theory.pep_delay.ConvexInterpolant`); production SGD + ``DelayedOptimizer`` run on
  it retraces the PEP's worst-case trajectory and reaches its worst-case value; a delay core
  that ignores the delay, delays by one step too many, flips EF's sign or misapplies γ does
  not.
* The committed results (``theory/pep_delay_results.json``) are recomputed on a sample.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from asyncpp.delay import DelayedOptimizer, optimal_ef_gamma
from theory import pep_delay as P
from verify.mutants import EF_GAMMA_MUTANT, DelayTwoAsOne, EFSignError
from verify.profiles import examples
from verify.systems import PRODUCTION, System

DT = torch.float64


def _correction(method: P.Method) -> tuple[str, dict]:
    """Production's correction and keyword for EF(γ) (γ = 0: none; γ = 1: the default EF)."""
    if method.gamma == 0 or method.tau == 0:
        return "none", {}
    if method.gamma == 1:
        return "ef", {}
    return "ef", {"ef_gamma": float(method.gamma)}


def production_trajectory(system: System, method: P.Method, K: int, oracle, x0) -> np.ndarray:
    """Iterates x_0 … x_{τ+K} of ``system``'s SGD + delay core on the gradient ``oracle``
    (one ``step()`` per iterate, float64, the gradient computed at the current weights)."""
    p = torch.nn.Parameter(torch.tensor(np.asarray(x0, dtype=float), dtype=DT))
    opt = system.sgd([([p], float(method.eta), float(method.beta))])
    correction, kw = _correction(method)
    delayed = system.delayed(opt, method.tau, correction, **kw)
    xs = [p.detach().numpy().copy()]
    for _ in range(method.tau + K):
        p.grad = torch.tensor(oracle(p.detach().numpy().copy()), dtype=DT)
        delayed.step()
        xs.append(p.detach().numpy().copy())
    return np.array(xs)


class _DelayBlind(DelayedOptimizer):
    """Asked for delay τ, applies every gradient at once (τ = 0): the delay is ignored."""

    def __init__(self, optimizer, delay=1, correction="none", **kw):
        super().__init__(optimizer, 0, "none")


class DelayBlind(System):
    name = "delay_blind"

    def delayed(self, opt, delay, correction="none", track_updates=False, ef_gamma=1.0):
        return _DelayBlind(opt, delay, correction)


# ------------------------------------------------------------------ the method is production's
@examples(10)
@given(beta=st.sampled_from([0.0, 0.5, 0.9]), tau=st.integers(0, 3),
       gamma=st.sampled_from([0.0, 1.0, 0.37, 2.5]),
       eta=st.floats(0.05, 2.0), h=st.floats(0.01, 1.0), K=st.integers(1, 12))
def test_run_is_production_on_a_quadratic(beta, tau, gamma, eta, h, K):
    """On f = h x²/2 the PEP's recursion (the same :func:`run` that builds the SDP, on numpy
    arrays) and production agree to rounding, for every draw (rounding relative to the
    largest iterate: the two sum the same terms in a different order)."""
    m = P.Method(eta, beta, tau, gamma)
    got = P.quadratic_factors(m, K, np.array([h]))[0]
    traj = production_trajectory(PRODUCTION, m, K, lambda x: h * x, np.array([1.0]))[:, 0]
    scale = float(np.max(np.abs(traj)))
    assert abs(got - traj[-1]) <= 1e-12 * scale * (tau + K)


# ------------------------------------------------------------------ known worst cases
@pytest.mark.parametrize("K", [2, 4])
@pytest.mark.parametrize("h", [0.25, 0.5, 1.0])
def test_gradient_descent_worst_case(K, h):
    """β = 0, τ = 0 is gradient descent: the exact worst case on L-smooth convex functions
    with ‖x_0 − x_*‖ ≤ 1 is L/(4Kh + 2) for h = ηL ≤ 1 (Drori & Teboulle 2014)."""
    assert P.worst_case(P.Method(h, 0.0, 0), K) == pytest.approx(1 / (4 * K * h + 2), rel=1e-6)


def test_nonconvex_gradient_descent_matches_pepit_example():
    """τ = 0, β = 0: the non-convex PEP equals PEPit's own gradient-descent example (whose
    condition is f(x_0) − f(x_K) ≤ 1; for gradient descent with ηL < 2 the values decrease,
    so it is the same as ours, f(x_0) − f(x_t) ≤ 1 for every t). PEPit's example is solved
    with the interior-point solver ours uses: left to cvxpy's default it may get SCS
    (cvxpy 1.9.3 does), whose first-order accuracy puts h = 0.5 at 0.571462 against the exact
    4/7 = 0.571429 (relative 6e-5)."""
    import cvxpy as cp
    from PEPit.examples.nonconvex_optimization import wc_gradient_descent

    for h in (0.5, 1.0, 1.5):
        ref, _ = wc_gradient_descent(L=1.0, gamma=h, n=4, solver=getattr(cp, P.SOLVER),
                                     verbose=-1)
        assert P.worst_case(P.Method(h, 0.0, 0), 4, "nonconvex") == pytest.approx(ref, rel=1e-5)


def test_gradient_descent_edges():
    """Gradient descent contracts on both classes exactly up to ηL = 2."""
    for cls in P.CLASSES:
        assert P.pep_edge(0.0, 0, 0.0, 2, cls, hi=3.0, tol=1e-3) == pytest.approx(2.0, abs=2e-3)


@examples(6)
@given(beta=st.sampled_from([0.0, 0.5, 0.9]), tau=st.integers(0, 2),
       gamma=st.sampled_from([0.0, 1.0, 0.6, 2.0]), eta=st.floats(0.05, 2.5),
       K=st.integers(1, 4))
def test_pep_dominates_quadratics(beta, tau, gamma, eta, K):
    """Every quadratic h x²/2, 0 < h ≤ L, is in the class, so W_K ≥ max_h h r_N(h)²/2."""
    m = P.Method(eta, beta, tau, gamma)
    w, q = P.worst_case(m, K), P.quadratic_worst_case(m, K)
    assert w >= q * (1 - 1e-6) - 1e-8


def test_pep_edge_below_quadratic_edge():
    """At the same horizon the class edge is at most the quadratic one, and strictly below it
    for synchronous momentum (β = 0.5, K = 4), where the worst case is not a quadratic."""
    for tau, gamma in ((0, 0.0), (1, 1.0), (2, 0.0)):
        pep = P.pep_edge(0.5, tau, gamma, 4, tol=2e-3)
        quad = P.quadratic_edge_K(0.5, tau, gamma, 4)
        assert pep <= quad + 2e-3
        if tau == 0:
            assert pep < 0.8 * quad


# ------------------------------------------------------------------ production on the worst case
#: (η, β, τ, γ): synchronous momentum, delay without correction, EF, EF(γ*) at τ = 1 and 2
INSTANCES = [
    (2.0, 0.5, 0, 0.0),
    (0.7, 0.5, 1, 0.0),
    (0.8, 0.5, 1, 1.0),
    (0.9, 0.5, 1, optimal_ef_gamma(0.5, 1)),
    (0.5, 0.5, 2, optimal_ef_gamma(0.5, 2)),
]
K_WC = 4
#: the PEP's coordinates carry the square root of the SDP's accuracy (~1e-10 on the Gram
#: matrix): 1e-3 of ‖x_0 − x_*‖ = 1 is far above that, and far below what a mutant changes
TOL = 1e-3


@pytest.fixture(scope="module")
def worst_cases():
    out = {}
    for inst in INSTANCES:
        m = P.Method(*inst)
        sol = P.solve_with_points(m, K_WC)
        out[inst] = (m, sol, P.ConvexInterpolant(*sol["data"]))
    return out


def _deviation(system, m, sol, f):
    xs = production_trajectory(system, m, K_WC, lambda x: f(x)[1], sol["x"][0])
    traj = float(np.max(np.linalg.norm(xs - sol["x"], axis=1)))
    gap = f(xs[-1])[0] - f(sol["x_star"])[0]
    return traj, gap


@pytest.mark.parametrize("inst", INSTANCES, ids=lambda i: f"eta{i[0]}-tau{i[2]}-g{i[3]:.3g}")
def test_production_follows_the_worst_case(worst_cases, inst):
    """Production on the reconstructed worst-case function retraces the PEP's iterates and
    ends at the PEP's worst-case value; the interpolant reproduces the solution's gradients
    at its points (it is a genuine L-smooth convex function through them)."""
    m, sol, f = worst_cases[inst]
    X, G, F = sol["data"]
    for x, g, fv in zip(X, G, F):
        fx, gx = f(x)
        assert fx == pytest.approx(fv, abs=TOL ** 2)
        assert np.linalg.norm(gx - g) <= TOL
    assert np.linalg.norm(sol["x"][0] - sol["x_star"]) <= 1 + 1e-6
    traj, gap = _deviation(PRODUCTION, m, sol, f)
    assert traj <= TOL
    assert gap == pytest.approx(sol["W"], rel=TOL)
    assert sol["W"] >= P.quadratic_worst_case(m, K_WC) * (1 - 1e-6)


def test_worst_cases_are_not_quadratic(worst_cases):
    """The check is not about quadratics in disguise: at these instances the worst case
    exceeds every quadratic's by at least 30 % for synchronous momentum and EF (τ = 1)."""
    for inst in (INSTANCES[0], INSTANCES[2]):
        m, sol, _ = worst_cases[inst]
        assert sol["W"] > 1.3 * P.quadratic_worst_case(m, K_WC)


#: each mutant with the instances it mutates (delay-blind: any delay; delay 2 as 1: τ = 1,
#: none or EF; EF sign: the paper's EF; γ misapplied: EF(γ) with γ ∉ {0, 1})
MUTANT_CASES = [
    (DelayBlind(), lambda m: m.tau >= 1),
    (DelayTwoAsOne(), lambda m: m.tau == 1 and m.gamma in (0.0, 1.0)),
    (EFSignError(), lambda m: m.tau >= 1 and m.gamma == 1.0),
    (EF_GAMMA_MUTANT, lambda m: m.tau >= 1 and m.gamma not in (0.0, 1.0)),
]


@pytest.mark.parametrize("case", MUTANT_CASES, ids=lambda c: c[0].name)
def test_mutants_leave_the_worst_case(worst_cases, case):
    """A broken delay core, run on the same worst-case functions, leaves the PEP's trajectory
    (or misses its value) by far more than the tolerance, on every instance it mutates."""
    mutant, applies = case
    devs = []
    for inst in INSTANCES:
        m, sol, f = worst_cases[inst]
        if applies(m):
            traj, gap = _deviation(mutant, m, sol, f)
            devs.append(max(traj, abs(gap - sol["W"]) / sol["W"]))
    assert devs and min(devs) > 20 * TOL, devs


# ------------------------------------------------------------------ the committed results
RESULTS = Path(__file__).resolve().parent.parent / "theory" / "pep_delay_results.json"


@pytest.mark.skipif(not RESULTS.exists(), reason="theory/pep_delay_results.json not written")
def test_committed_results_recompute():
    """A sample of the committed table is recomputed: one convex curve point per (τ,
    correction) at the book's horizon, and two of the K = 8 convex edges at the book's β."""
    data = json.loads(RESULTS.read_text())
    K = data["K_curves"]
    beta = data["beta"]
    for key, curve in data["curves"].items():
        tau, gamma = curve["tau"], curve["gamma"]
        i = len(curve["eta"]) // 3
        w = P.worst_case(P.Method(curve["eta"][i], beta, tau, gamma), K)
        assert w == pytest.approx(curve["pep"][i], rel=1e-5), key
    for row in data["edges"]:
        if row["beta"] != beta or row["K"] != 8 or (row["tau"], row["label"]) not in (
                (1, "none"), (2, "EF(γ*)")):
            continue
        e = P.pep_edge(beta, row["tau"], row["gamma"], 8, "convex", tol=data["tol"])
        assert math.isclose(e, row["pep_convex"], abs_tol=2 * data["tol"]), row
