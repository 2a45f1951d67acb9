"""What the theory pages claim is checked: the project's own reasoning is labelled as such,
TC4 is a checked inequality, EF's growth with β is scoped by delay and coefficient, and T3 at
τ = 0 with EF(γ) agrees with the float64 recursion."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory import ef_nodelay, stability, taylor
from theory.__main__ import main

REASONING = ("E4", "E13", "SC12", "SC13", "SO11", "N3", "N4", "TI3", "MC8", "W0", "W2", "W3a",
             "W6a", "X1", "X3", "V6")


def _steps_named(prefix: str):
    # SC12/SC13 also number checked steps of other results; the reasoning ones say what they do
    return [s for r in theory.all_results() for s in r.steps
            if s.name.split(" ", 1)[0] == prefix
            and (prefix not in ("SC12", "SC13") or "sign bookkeeping" in s.name)]


@pytest.mark.parametrize("prefix", REASONING)
def test_own_reasoning_is_not_called_cited(prefix):
    found = _steps_named(prefix)
    assert found, prefix
    assert all(s.kind == "reasoning" and s.check() == "reasoned" for s in found)


def test_python_m_theory_lists_the_reasoning_steps(capsys):
    assert main(["--quiet"]) == 0
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.strip().startswith("reasoning: ")]
    assert any("sign bookkeeping" in line for line in listed)
    assert any("counting lemma" in line for line in listed)
    assert not any(line.strip().startswith("cited: sign bookkeeping") for line in out.splitlines())


def test_tc4_is_a_checked_inequality_and_needs_its_premise():
    tc4 = next(s for s in taylor.result().steps if s.name.startswith("TC4"))
    assert tc4.kind == "inequality" and tc4.check() == "verified"
    bare = type(tc4)(name=tc4.name, kind="inequality", relation=tc4.relation)
    assert bare.check() == "FAILED"


def test_ef_growth_scope_is_checked():
    checks = stability.ef_growth_checks()
    assert checks and all(ok for _, ok, _ in checks), [c for c in checks if not c[1]]
    rows = {(r["tau"], r["beta"]): r for r in stability.ef_growth_table((2,))}
    got = [round(rows[(2, b)]["c_gamma_star"], 2) for b in (0.9, 0.95, 0.99)]
    assert got == [1.25, 2.12, 9.20]
    # the paper's EF at tau = 2 never reaches 1, whatever beta
    assert all(rows[(2, b)]["c_ef"] < 1.0 for b in (0.9, 0.95, 0.99))


def test_tau0_ef_gamma_result_verifies():
    res = ef_nodelay.result()
    statuses = dict((s.name, st) for s, st in res.check())
    assert "FAILED" not in statuses.values()
    b, g = sp.symbols("beta gamma")
    assert sp.simplify(ef_nodelay.critical_step_nodelay_expr().subs(
        {ef_nodelay.beta: b, ef_nodelay.gamma_sym: g}) - 2 * (1 + b) / ((1 + 2 * g) * (1 - b))) == 0


def _radius_scan(beta: float, gamma: float, c: float) -> float:
    p = c * (1.0 - beta)
    coeffs = [1.0, -(1.0 + beta) + p * (1.0 + gamma), beta - p * gamma]
    return float(np.max(np.abs(np.roots(coeffs))))


@settings(max_examples=60, deadline=None)
@given(beta=st.floats(0.0, 0.99), gamma=st.floats(0.0, 4.0))
def test_tau0_ef_gamma_critical_step_is_the_edge(beta, gamma):
    cs = ef_nodelay.critical_step_nodelay(beta, gamma)
    assert _radius_scan(beta, gamma, cs * (1 - 1e-6)) < 1.0
    assert _radius_scan(beta, gamma, cs * (1 + 1e-6)) > 1.0
    # every smaller step is stable too (a grid over (0, c*))
    assert all(_radius_scan(beta, gamma, cs * f) < 1.0 for f in np.linspace(0.01, 0.999, 60))


@pytest.mark.parametrize("beta,gamma", [(0.0, 1.0), (0.5, 1.0), (0.9, 1.0), (0.9, 0.5)])
def test_tau0_ef_recursion_decays_below_and_grows_above(beta, gamma):
    cs = ef_nodelay.critical_step_nodelay(beta, gamma)
    lo = ef_nodelay.simulate_nodelay(beta, 0.97 * cs, gamma, steps=4000)
    hi = ef_nodelay.simulate_nodelay(beta, 1.03 * cs, gamma, steps=4000)
    assert abs(lo[-1]) < 1e-6 and abs(hi[-1]) > 1e6


def test_tau0_ef_narrows_the_plain_range_and_tau1_ef_widens_it():
    # (at beta = 1/2 the paper's EF at tau = 1 is exactly 1, as without it: it widens above)
    for b in (0.6, 0.9, 0.99):
        plain0 = stability.critical_step(b, 0)
        assert ef_nodelay.critical_step_nodelay(b, 1.0) == pytest.approx(plain0 / 3, rel=1e-12)
        assert stability.critical_step(b, 1, True) > stability.critical_step(b, 1)
