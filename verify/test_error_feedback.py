"""Property 4: T2's data-dependent bound with the measured drift, and the mechanism.

(a) The drift (1/(Kη)) Σ_k ‖u_{k−1} − u_{k−τ−1}‖ measured on the production EF run (spectral
norm from the recorded updates, and Frobenius norm from ``DelayedOptimizer(track_updates=True)
.stats``), inserted into ``theory.error_feedback.bound``, bounds the measured stationarity at
the iterates and at the virtual points (the records come from ``test_bounds.py``'s T2 runs and
from the extra draws here).
(b) On noisy problems, the drift falls strictly along β = 0, 0.5, 0.9, 0.97.
"""

from hypothesis import given
from hypothesis import strategies as st

from verify.identities import IdInstance, drift_bridge
from verify.profiles import examples
from verify.properties import FAMILIES, Instance, drift_falls_with_beta, t2_bound
from verify.strategies import check, instances, log_uniform

DRIFT = "T2 data-dependent: measured drift inserted into theory.error_feedback.bound"
BRIDGE = ("reported relative Frobenius drift rho_n (DriftMeter) vs T2's spectral drift delta_n "
          "(SpectralDrift): delta_n <= rho_n U_n/eta <= (1+eps1) sqrt(R) rho_n and rho_n <= "
          "sqrt(R) eta delta_n/U_n; record = max delta_n/((1+eps1) sqrt(R) rho_n)")
MECH = ("EF drift (1/(K eta)) sum ||u_{k-1}-u_{k-2}||_2 strictly decreasing along "
        "beta = 0, 0.5, 0.9, 0.97 (noisy gradients); record = max consecutive ratio")


@examples(6)
@given(inst=instances(taus=st.just(1), noisy=False, max_K=150, nesterov=False,
                      dtypes=("float64",)))
def test_t2_data_dependent_bound_holds_deterministic(inst):
    check(t2_bound(inst), DRIFT)


@examples(6)
@given(family=st.sampled_from(FAMILIES), m=st.integers(2, 6), n=st.integers(2, 6),
       eta=log_uniform(-2.5, -1.3), sigma=log_uniform(-1, 0.3), seed=st.integers(0, 2**16))
def test_drift_falls_as_beta_grows(family, m, n, eta, sigma, seed):
    inst = Instance(family=family, m=m, n=n, eta=eta, tau=1, sigma=sigma, K=120, seeds=2,
                    problem_seed=seed)
    check(drift_falls_with_beta(inst), MECH)


@examples(12)
@given(inst=st.builds(IdInstance, family=st.sampled_from(FAMILIES), m=st.integers(1, 6),
                      n=st.integers(1, 6), beta=st.sampled_from([0.0, 0.5, 0.9, 0.95]),
                      lr=log_uniform(-2.5, -1), tau=st.integers(1, 2), ef=st.booleans(),
                      nesterov=st.booleans(), sigma=st.sampled_from([0.0, 0.3]),
                      steps=st.integers(4, 30), problem_seed=st.integers(0, 2**16)))
def test_reported_drift_vs_t2_drift(inst):
    check(drift_bridge(inst), BRIDGE)
