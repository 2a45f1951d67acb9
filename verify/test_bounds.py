"""Property 1: the convergence bounds T1, T2 (worst case) and T4 hold for the production
optimizer (``asyncpp.optim.Muon`` inside ``asyncpp.delay.DelayedOptimizer``).

Measured: the average over the K applied steps of ‖∇f‖_dual, averaged over independent noise
streams; it must not exceed the bound of ``theory/`` by more than the one-sided Cantelli margin
(``verify.properties.DELTA``). Instances (shapes, η, β, τ, σ, K, seeds, Nesterov, NS dtype,
problem family) are drawn by hypothesis.
"""

from hypothesis import given
from hypothesis import strategies as st

from verify.profiles import examples
from verify.properties import t1_bound, t2_bound, t4_bound
from verify.strategies import block_instances, check, instances

T1 = ("T1: mean over seeds of (1/K) sum_{k<K} ||grad f(x_{k+tau})||_* <= "
      "theory.delayed_lmo.bound (delayed Muon, no EF)")
T2 = ("T2 worst case: EF run, mean over seeds of (1/K) sum_k ||grad f(x_{k+tau})||_* <= "
      "theory.error_feedback.bound(drift=None, point='iterate')")
T4 = ("T4: per-stage delays, (1/K) sum_{t=tau_max}^{tau_max+K-1} ||grad f(x_t)||_dagger <= "
      "theory.variable_delay.bound(weights=L_s)")


@examples(25)
@given(inst=instances())
def test_t1_bound_holds(inst):
    check(t1_bound(inst), T1)


@examples(12)
@given(inst=instances(taus=st.integers(1, 2), max_K=120, seeds=3))
def test_t2_worst_case_bound_holds(inst):
    recs = t2_bound(inst)
    check([r for r in recs if r.prop == "P1.T2.worst"], T2)
    # the data-dependent records of the same runs belong to property 4
    check([r for r in recs if r.prop != "P1.T2.worst"],
          "T2 data-dependent: measured drift inserted into theory.error_feedback.bound")


@examples(12)
@given(inst=block_instances())
def test_t4_bound_holds(inst):
    check(t4_bound(inst), T4)
