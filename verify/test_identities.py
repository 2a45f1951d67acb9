"""Property 0 (exact identities) and the tight lemmas of property 2b, on production code.

I1–I4 pin the MODEL steps of the theorems (T1's delayed LMO, T2's EF recursion and virtual
sequence, the momentum definition, DC-ASGD) to ``asyncpp.optim.Muon`` / ``torch.optim.SGD``
inside ``asyncpp.delay.DelayedOptimizer``: residual / step size ≤ 1e-9 in float64. L1–L3 are
the theory-side lemmas measured step by step (``verify/identities.py``)."""

from hypothesis import given
from hypothesis import strategies as st

from verify.identities import (
    IdInstance,
    TaylorInstance,
    ef_identities,
    ef_momentum_lemma,
    nesterov_momentum_lemma,
    taylor_properties,
)
from verify.profiles import examples
from verify.properties import FAMILIES
from verify.strategies import betas, check, log_uniform

DESC = {
    "I1.ef_recursion": "x(t+1) - x(t) + 2u(t) - u(t-1) = 0 (EF) / + u(t) (no EF), u(t) = "
                       "lr NS(momentum buffer [Nesterov: lerp(g, buffer, beta)]) recomputed; "
                       "record = max residual / lr",
    "I2.virtual": "EF virtual sequence: w(t+1) - w(t) + u(t) = 0, w(t) = x(t) + EF memory "
                  "(prev_update); record = max residual / lr",
    "I3.delay_model": "applied step = Muon's step on the gradient recomputed at the stated "
                      "stale weights x(t - tau) (own momentum, own NS); residual / lr",
    "I4.taylor": "DC-ASGD: x(t+1) - x(t) + lr (g + lambda g*g*(x(t) - x(t-tau))) = 0; "
                 "residual / lr",
    "L1.ef_momentum_lemma": "T2 momentum lemma at the virtual point, every step: B_k <= "
                            "(1-a)B_{k-1} + (1-a)L||u_{k-1}|| + aL||o_k|| (o_k = u_{k-1}-u_{k-2} "
                            "for tau=1), all measured",
    "L2.nesterov_momentum_lemma": "Nesterov input: ||v_k - grad f(y_k)||_* <= (1-a)||m_k - "
                                  "grad f(y_k)||_* + aL||y_k - z_k||, and the unrolled buffer "
                                  "bound, every step",
    "L3.taylor_lemma": "theory.taylor TC4: |g^_i - grad_i f(x_now)| <= |g_i - grad_i f(x_now)| "
                       "when lambda g_i^2 <= 2 h_i; record = largest coordinate",
}


def _check(recs):
    for r in recs:
        check(r, DESC[r.prop])


@st.composite
def id_instances(draw, ef=None, nesterov=None, sigma=True, gamma=False):
    return IdInstance(
        family=draw(st.sampled_from(FAMILIES)), m=draw(st.integers(1, 6)),
        n=draw(st.integers(1, 6)), beta=draw(betas), lr=draw(log_uniform(-3, -0.7)),
        tau=draw(st.integers(1 if ef else 0, 3)),
        ef=draw(st.booleans()) if ef is None else ef,
        nesterov=draw(st.booleans()) if nesterov is None else nesterov,
        sigma=draw(st.one_of(st.just(0.0), log_uniform(-1.3, 0.3))) if sigma else 0.0,
        steps=draw(st.integers(4, 30)), problem_seed=draw(st.integers(0, 2**16)),
        gamma=draw(st.sampled_from([1.0, 1.0, 0.0, 0.5, 2.0, 3.0])) if gamma else 1.0)


@examples(25)
@given(inst=id_instances(gamma=True))
def test_exact_identities_on_production_muon(inst):
    if inst.ef and inst.tau == 0:
        inst = IdInstance(**{**inst.params(), "tau": 1})
    if not inst.ef:  # EF(γ) is a parameter of the EF correction only
        inst = IdInstance(**{**inst.params(), "gamma": 1.0})
    _check(ef_identities(inst))


@examples(15)
@given(inst=id_instances(ef=True, nesterov=False, sigma=False))
def test_ef_momentum_lemma_every_step(inst):
    _check([ef_momentum_lemma(inst)])


@examples(15)
@given(inst=id_instances(ef=False, nesterov=True, sigma=False))
def test_nesterov_momentum_lemma_every_step(inst):
    _check([nesterov_momentum_lemma(inst)])


@examples(15)
@given(inst=st.builds(TaylorInstance, dim=st.integers(1, 8), lr=log_uniform(-3, -0.5),
                      tau=st.integers(1, 3), steps=st.integers(4, 30),
                      seed=st.integers(0, 2**16), lam_frac=st.floats(0.05, 2.0)))
def test_taylor_identity_and_lemma(inst):
    _check(taylor_properties(inst))
