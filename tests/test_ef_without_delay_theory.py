"""EF without a delay against its theory: the production optimizer runs the recursion of
``theory.ef_nodelay`` and is stable exactly below T3[τ=0, EF(γ)]'s c*; ``ef_gamma="auto"``
(T3's γ*, which is 0 at τ = 0) is refused rather than silently turning EF off."""

from __future__ import annotations

import pytest
import torch

from asyncpp.delay import DelayedOptimizer
from asyncpp.train.config import ConfigError, from_dict, validate
from theory.ef_nodelay import critical_step_nodelay, simulate_nodelay

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(c: float, gamma: float, steps: int) -> torch.Tensor:
    """DelayedOptimizer(SGD, delay 0, EF(γ) without a delay) on f = x²/2 at lr = c."""
    x = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = DelayedOptimizer(torch.optim.SGD([x], lr=c), delay=0, correction="ef",
                           ef_gamma=gamma, ef_without_delay=True)
    out = [x.detach().clone()]
    for _ in range(steps):
        x.grad = x.detach().clone()
        opt.step()
        out.append(x.detach().clone())
    return torch.cat(out)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0])
def test_production_runs_the_theory_recursion_and_its_edge(gamma):
    """β = 0 (plain SGD is T3's EMA recursion there): stable just below c* = 2/(1+2γ), not
    just above; the trajectory is the theory's float64 recursion."""
    for factor, stable in ((0.98, True), (1.02, False)):
        c = factor * critical_step_nodelay(0.0, gamma)
        got = _run(c, gamma, 600)
        ref = torch.tensor(simulate_nodelay(0.0, c, gamma, steps=600))
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-12)
        assert (abs(float(ref[-1])) < 1e-3) == stable


def test_auto_gamma_is_refused_without_a_delay():
    x = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="give γ as a number"):
        DelayedOptimizer(torch.optim.SGD([x], lr=0.1, momentum=0.9), delay=0, correction="ef",
                         ef_gamma="auto", ef_without_delay=True)
    with pytest.raises(ConfigError, match="with a synchronous schedule give γ as a number"):
        validate(from_dict({"delay": {"correction": "ef", "ef_gamma": "auto"}}))
    # a number is accepted, and auto stays valid on a delayed schedule
    validate(from_dict({"delay": {"correction": "ef", "ef_gamma": "1"}}))
    validate(from_dict({"pipeline": {"schedule": "2bw"},
                        "delay": {"correction": "ef", "ef_gamma": "auto"}}))
