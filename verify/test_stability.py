"""Property 5: T3 is exact for the production code.

``torch.optim.SGD(momentum=β, dampening=β)`` (EMA momentum) inside
``asyncpp.delay.DelayedOptimizer`` (τ ∈ {0, 1, 2}, EF on/off) on f = h x²/2 converges at
ηh = 0.95·c* and diverges at ηh = 1.05·c*, c* = ``theory.stability.critical_step(β, τ, ef)``.
torch's first step sets the buffer to g (no dampening): this only changes the initial state of
the linear recursion, so it is accounted for by judging the asymptotic behaviour (see
``verify.properties.stability_check``).
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verify.profiles import examples
from verify.properties import stability_check
from verify.strategies import check, log_uniform

DESC = ("T3: production SGD(momentum=b, dampening=b) in DelayedOptimizer converges at "
        "0.95 c* and diverges at 1.05 c*; measured = growth factor per step, "
        "bound = spectral radius predicted by theory.stability")


@pytest.mark.parametrize("tau,ef", [(0, False), (0, True), (1, False), (2, False), (1, True),
                                    (2, True)])
@examples(4)
@given(beta=st.one_of(st.floats(0.0, 0.95), st.sampled_from([0.0, 0.9, 0.95])),
       h=log_uniform(-2, 2))
def test_critical_step_is_exact(tau, ef, beta, h):
    check(stability_check([(beta, h)], tau, ef), DESC)
