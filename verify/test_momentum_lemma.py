"""Property 2: the momentum-error lemma of T1 holds at every step of deterministic runs.

Along production runs with exact gradients, the buffer ``momentum_buffer`` of
``asyncpp.optim.Muon`` at applied step k (inside ``DelayedOptimizer(delay=τ)``) satisfies
‖m_k − ∇f(x_{k+τ})‖_* ≤ (1−α)^{k+1}E₀ + (1 − (1−α)^{k+1}) Lη(1+ε₁)((1−α)/α + τ) for all k < K.
"""

from hypothesis import given
from hypothesis import strategies as st

from verify.profiles import examples
from verify.properties import momentum_lemma
from verify.strategies import check, instances

DESC = ("momentum lemma (T1, steps M3-M10): ||m_k - grad f(x_{k+tau})||_* <= (1-a)^{k+1} E0 + "
        "(1-(1-a)^{k+1}) L eta r ((1-a)/a + tau) at every k; record at the k of largest ratio")


@examples(25)
@given(inst=instances(taus=st.integers(0, 4), noisy=False, max_K=200, nesterov=False))
def test_momentum_error_under_lemma_at_every_step(inst):
    check(momentum_lemma(inst), DESC)
