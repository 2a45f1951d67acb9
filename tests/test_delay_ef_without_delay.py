r"""EF without a delay — the τ = 0 control: ``DelayedOptimizer(opt, delay=0, correction="ef",
ef_without_delay=True)`` realises :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}` with
:math:`u_t = U(g_t; x_t)` the wrapped optimizer's own step, :math:`u_{-1} = 0` (float64, against
a hand-written recursion), and ``asyncpp-train --pipeline.schedule none --delay.correction ef``
builds exactly that wrapper.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncpp.delay import DelayedOptimizer
from asyncpp.train.config import from_dict, validate


def _grad(x: torch.Tensor, A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return A @ x - b  # gradient of ½xᵀAx − bᵀx


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.sampled_from([0.0, 0.5, 1.0, 2.0]),
       st.floats(0.01, 0.5), st.floats(0.0, 0.95), st.integers(0, 2**16))
def test_ef_without_delay_is_the_extrapolated_recursion(n, steps, gamma, lr, momentum, seed):
    """SGD with momentum (U reads its own state), any γ: the wrapper's iterates equal the
    recursion x ← x − (1+γ)u_t + γu_{t−1} on a twin optimizer's updates."""
    g = torch.Generator().manual_seed(seed)
    M = torch.randn(n, n, generator=g, dtype=torch.float64)
    A, b = M @ M.T + torch.eye(n, dtype=torch.float64), torch.randn(n, generator=g,
                                                                     dtype=torch.float64)
    x0 = torch.randn(n, generator=g, dtype=torch.float64)
    p = torch.nn.Parameter(x0.clone())
    opt = DelayedOptimizer(torch.optim.SGD([p], lr=lr, momentum=momentum), delay=0,
                           correction="ef", ef_gamma=gamma, ef_without_delay=True)
    twin = torch.nn.Parameter(x0.clone())
    plain = torch.optim.SGD([twin], lr=lr, momentum=momentum)
    x, prev = x0.clone(), torch.zeros(n, dtype=torch.float64)
    for _ in range(steps):
        p.grad = _grad(p.detach(), A, b)
        opt.step()
        # the twin computes U(g_t; x_t) at the same x_t, with the same optimizer state
        with torch.no_grad():
            twin.copy_(x)
        twin.grad = _grad(x, A, b)
        plain.step()
        u = x - twin.detach()
        x = x - (1 + gamma) * u + gamma * prev
        prev = u
        torch.testing.assert_close(p.detach(), x, rtol=1e-12, atol=1e-12)


def test_adamw_state_and_the_extrapolation_stay_apart():
    """AdamW (decoupled weight decay reads x): the extrapolation is applied to the finished
    update; the optimizer's moments see exactly the gradients a plain run would see."""
    torch.manual_seed(0)
    w = torch.randn(5, 3, dtype=torch.float64)
    p = torch.nn.Parameter(w.clone())
    opt = DelayedOptimizer(torch.optim.AdamW([p], lr=0.05, weight_decay=0.1), delay=0,
                           correction="ef", ef_without_delay=True)
    twin = torch.nn.Parameter(w.clone())
    plain = torch.optim.AdamW([twin], lr=0.05, weight_decay=0.1)
    x, prev = w.clone(), torch.zeros_like(w)
    for t in range(8):
        grad = torch.sin(x * (t + 1))
        p.grad = grad.clone()
        opt.step()
        with torch.no_grad():
            twin.copy_(x)
        twin.grad = grad.clone()
        plain.step()
        u = x - twin.detach()
        x = x - 2 * u + prev
        prev = u
        torch.testing.assert_close(p.detach(), x, rtol=1e-12, atol=1e-12)
    for key in ("exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(opt.optimizer.state[p][key], plain.state[twin][key],
                                   rtol=0, atol=0)


def test_off_by_default_and_bit_identical_to_the_plain_optimizer():
    torch.manual_seed(1)
    w = torch.randn(4, dtype=torch.float64)
    a, b = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    wrapped = DelayedOptimizer(torch.optim.SGD([a], lr=0.1, momentum=0.9), delay=0,
                               correction="ef")
    plain = torch.optim.SGD([b], lr=0.1, momentum=0.9)
    for _ in range(5):
        a.grad, b.grad = a.detach() ** 2, b.detach() ** 2
        wrapped.step()
        plain.step()
    assert torch.equal(a, b)


def test_checkpoint_round_trip_and_mismatch():
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    opt = DelayedOptimizer(torch.optim.SGD([p], lr=0.1), delay=0, correction="ef",
                           ef_without_delay=True)
    for _ in range(3):
        p.grad = p.detach().clone()
        opt.step()
    state = copy.deepcopy(opt.state_dict())
    q = torch.nn.Parameter(p.detach().clone())
    again = DelayedOptimizer(torch.optim.SGD([q], lr=0.1), delay=0, correction="ef",
                             ef_without_delay=True)
    again.load_state_dict(state)
    p.grad, q.grad = p.detach().clone(), q.detach().clone()
    opt.step()
    again.step()
    assert torch.equal(p, q)  # the EF memory came back
    plain = DelayedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1),
                             delay=0, correction="ef")
    with pytest.raises(ValueError, match="ef_without_delay"):
        plain.load_state_dict(state)


def test_only_with_ef():
    with pytest.raises(ValueError, match="correction='ef' only"):
        DelayedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1),
                         delay=0, correction="none", ef_without_delay=True)


def test_the_cli_builds_the_control_on_synchronous_schedules_in_one_process():
    from asyncpp.train.components import build_stage_optimizer

    model = torch.nn.Linear(4, 4)
    alone = from_dict({"pipeline": {"schedule": "none"}, "delay": {"correction": "ef"}})
    validate(alone)
    opt = build_stage_optimizer(alone, model.named_parameters(), 0, torch.device("cpu"))
    assert opt.ef_without_delay and opt.schedule.delays == (0,)
    one_f_one_b = from_dict({"pipeline": {"schedule": "1f1b", "stages": 2, "microbatches": 2},
                             "delay": {"correction": "ef"}})
    validate(one_f_one_b, world_size=1)
    opt = build_stage_optimizer(one_f_one_b, model.named_parameters(), 1, torch.device("cpu"))
    assert opt.ef_without_delay
    from asyncpp.train.config import ConfigError

    with pytest.raises(ConfigError, match="runs in one process"):
        validate(one_f_one_b, world_size=2)
    delayed = from_dict({"pipeline": {"schedule": "2bw", "stages": 2, "microbatches": 2},
                         "delay": {"correction": "ef"}})
    validate(delayed)
    opt = build_stage_optimizer(delayed, model.named_parameters(), 0, torch.device("cpu"))
    assert not opt.ef_without_delay


def test_a_cli_run_with_ef_on_1f1b_extrapolates_from_its_second_step(tmp_path, monkeypatch,
                                                                      capsys):
    """Through ``asyncpp-train``: 1F1B + EF equals 1F1B on the first step (u₋₁ = 0, no
    extrapolation yet: x₁ = x₀ − 2u₀ differs, but the loss of step 1 is read at x₀) and moves
    away from the second on."""
    from asyncpp.train import cli
    from asyncpp.train.metrics import read_metrics

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASYNCPP_CACHE", str(tmp_path / "cache"))
    base = ["--data.max_documents", "40", "--data.seq_len", "16", "--train.batch_size", "4",
            "--train.eval_every", "0", "--train.eval_batches", "1", "--log.progress", "false",
            "--log.plot", "false", "--log.tensorboard", "off", "--run.threads", "1",
            "--train.steps", "4", "--pipeline.schedule", "1f1b", "--pipeline.stages", "2",
            "--pipeline.microbatches", "2"]
    assert cli.main([*base, "--run.dir", "sync"]) == 0
    assert cli.main([*base, "--run.dir", "ef", "--delay.correction", "ef"]) == 0
    a, b = read_metrics(tmp_path / "sync"), read_metrics(tmp_path / "ef")
    assert a[0]["train_loss"] == b[0]["train_loss"]
    assert all(x["train_loss"] != y["train_loss"] for x, y in zip(a[1:], b[1:]))
