"""Symbolic self-checks of ``theory/``: every proof step re-verified, the checker itself tested
against wrong steps (it must reject them), and ``python -m theory``."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sympy as sp

import theory
from theory import delayed_lmo, error_feedback, stability, variable_delay
from theory.assumptions import (
    ASSUMPTIONS,
    FAILED,
    KINDS,
    VERIFIED,
    Result,
    Step,
    alpha,
    certify_nonneg,
    eq,
    eta,
    ge,
    k,
    le,
    sigma,
)

RESULTS = theory.all_results()


@pytest.mark.parametrize("res", RESULTS, ids=[r.name for r in RESULTS])
def test_every_step_verified(res: Result):
    statuses = res.check()
    failed = [s.name for s, st in statuses if st == FAILED]
    assert not failed, f"{res.name}: failed steps {failed}"
    # checkable kinds are verified; unchecked kinds are labelled as such
    for s, st in statuses:
        assert s.kind in KINDS
        if s.kind in ("assumption", "cited", "reasoning"):
            assert st in ("assumed", "cited", "reasoned")
        elif s.kind == "definition":
            assert st == "defined", (res.name, s.name)
        else:
            assert st == VERIFIED, (res.name, s.name)
    assert set(res.assumptions) <= set(ASSUMPTIONS) | {"quadratic f = h x^2/2"}
    assert res.latex().count(r"\begin{align*}") == 1


@pytest.mark.parametrize("res", RESULTS, ids=[r.name for r in RESULTS])
def test_most_steps_machine_checked(res: Result):
    cnt = res.counts()
    assert cnt.get(VERIFIED, 0) >= (cnt.get("cited", 0) + cnt.get("assumed", 0)
                                     + cnt.get("reasoned", 0) - 6)


def _fresh(step: Step, **changes) -> Step:
    """A copy of ``step`` with some fields changed and the cached status cleared."""
    fields = {f: getattr(step, f) for f in ("name", "kind", "relation", "note", "uses",
                                              "rewrites", "induction", "mono",
                                              "induction_var", "refs", "domain", "model")}
    fields.update(changes)
    return Step(**fields)


def _by_name(res: Result, prefix: str) -> Step:
    return next(s for s in res.steps if s.name.startswith(prefix))


def test_checker_rejects_a_tighter_final_bound():
    res = delayed_lmo.result(False)
    f2 = _by_name(res, "F2")
    # claim the delay term is tau L eta instead of C tau L eta (r): must fail
    wrong = f2.relation.rhs - sp.Symbol("tau", nonnegative=True, integer=True) * eta * sp.Symbol(
        "L", positive=True)
    assert _fresh(f2, relation=le(f2.relation.lhs, wrong)).check() == FAILED
    assert _fresh(f2).check() == VERIFIED


def test_checker_rejects_wrong_multiplier_and_wrong_identity():
    res = delayed_lmo.result(False)
    d3 = _by_name(res, "D3")
    assert _fresh(d3).check() == VERIFIED
    assert _fresh(d3, uses=(d3.uses[0],)).check() == FAILED  # without the band premise
    assert _fresh(d3, uses=(d3.uses[0], (d3.uses[1][0], -1))).check() == FAILED  # λ < 0
    m1 = _by_name(res, "M1")
    assert _fresh(m1, relation=eq(m1.relation.lhs, m1.relation.rhs + alpha)).check() == FAILED


def test_checker_rejects_wrong_sum_and_wrong_induction():
    res = delayed_lmo.result(False)
    m7 = _by_name(res, "M7")
    assert _fresh(m7, relation=eq(m7.relation.lhs, m7.relation.rhs + 1)).check() == FAILED
    m13 = _by_name(res, "M13")
    V = m13.relation.lhs.func
    too_small = _fresh(m13, relation=le(V(k), alpha**2 * sigma**2))
    assert too_small.check() == FAILED


def test_checker_rejects_wrong_monotonicity():
    res = delayed_lmo.result(False)
    p6 = _by_name(res, "P6")
    g, v, direction, premise = p6.mono
    assert _fresh(p6, mono=(g, v, -direction, premise)).check() == FAILED


def test_checker_rejects_wrong_critical_step():
    res = stability.result(2, False)
    s5 = _by_name(res, "SC5")
    g = s5.relation.lhs
    assert _fresh(s5, relation=eq(g + sp.Rational(1, 100), 0)).check() == FAILED
    res_ef = stability.result(2, True)
    s7 = _by_name(res_ef, "SC7")
    phi = stability.ef2_cubic()
    p = stability.p
    # phi(1/2) > 0 is false for beta = 0 (the root is 0.532): no certificate may exist
    assert _fresh(s7, relation=ge(phi.subs(p, sp.Rational(1, 2)), 0)).check() == FAILED


def test_certificate_basics():
    assert certify_nonneg(alpha - alpha / (2 - alpha))
    assert certify_nonneg(1 - alpha)
    assert not certify_nonneg(alpha - 1)
    assert not certify_nonneg(alpha - sp.Rational(1, 2))
    b = sp.Symbol("beta", nonnegative=True)
    assert certify_nonneg(3 + b - sp.sqrt(b**2 - 2 * b + 5))
    assert not certify_nonneg(sp.sqrt(b**2 - 2 * b + 5) - 3 - b)


def test_unchecked_steps_are_listed():
    for res in RESULTS:
        names = [s.name for s in res.unchecked()]
        assert all(s.kind in ("assumption", "cited", "reasoning") for s in res.unchecked())
        assert len(names) == len(set(names))
    t1 = delayed_lmo.result(False)
    kinds = {s.name.split(" ", 1)[1]: s.kind for s in t1.unchecked()}
    assert kinds["descent lemma"] == "cited"
    assert kinds["duality"] == "cited"
    assert kinds["band: norm"] == "assumption"


def test_python_m_theory_exits_zero(capsys):
    from theory import __main__ as cli

    # in-process (the step statuses are cached from the tests above)
    assert cli.main(["--quiet"]) == 0
    out = capsys.readouterr().out
    assert "all machine-checkable steps verified" in out
    assert "FAILED" not in out


def test_python_m_theory_is_a_command():
    out = subprocess.run([sys.executable, "-m", "theory", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "--latex" in out.stdout


def test_main_returns_one_on_a_failure(monkeypatch, capsys):
    from theory import __main__ as cli

    bad = Result(name="BAD", title="t", quantity="q", quantity_latex="q",
                 statement=sp.Integer(1), params=(), assumptions=("A0",),
                 steps=[Step("X bad", "identity", eq(alpha, alpha + 1))])
    monkeypatch.setattr(cli, "all_results", lambda: [bad])
    assert cli.main(["--quiet"]) == 1
    assert "FAILED steps" in capsys.readouterr().out


def test_definitions_are_not_counted_as_verified():
    t1 = delayed_lmo.result(False)
    assert _by_name(t1, "O1").check() == "defined"
    assert _by_name(error_feedback.result(False), "V7").check() == "defined"
    t4 = variable_delay.result(False)
    assert _by_name(t4, "W4b").check() == "defined"
    # a definition that contradicts its model fails
    o1 = _by_name(t1, "O1")
    assert _fresh(o1, relation=eq(o1.relation.lhs, o1.relation.rhs + 1)).check() == FAILED
    # W6 is now a checked inequality; W13 states tau_eff = 1 for 2BW, not an empty derivative
    assert _by_name(t4, "W6 ").kind == "inequality" and _by_name(t4, "W6 ").check() == VERIFIED
    assert _by_name(t4, "W13 ").relation.has(sp.Symbol("P", positive=True, integer=True))


def test_m13_uses_the_exact_fixed_point():
    m13 = _by_name(delayed_lmo.result(False), "M13")
    V = m13.relation.lhs.func
    assert sp.simplify(m13.relation.rhs - alpha * sigma**2 / (2 - alpha)) == 0
    # anything strictly below the fixed point cannot be proved by the induction
    below = _fresh(m13, relation=le(V(k), alpha * sigma**2 / (2 - alpha) * sp.Rational(99, 100)))
    assert below.check() == FAILED


def test_module_results_cover_the_issue():
    assert {r.name for r in RESULTS} >= {"T1", "T1-nesterov", "T2", "T2-nesterov", "T4",
                                         "T3[tau=0]", "T3[tau=1]", "T3[tau=2]",
                                         "T3[tau=1, EF]", "T3[tau=2, EF]"}
    assert error_feedback.result().statement.has(sp.Symbol("delta", nonnegative=True))
    assert variable_delay.result().statement.has(variable_delay.tau_eff)
