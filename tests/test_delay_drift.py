"""DriftMeter: the update drift of theorem T2 from DelayedOptimizer's ``track_updates`` records,
aligned by update ordinal across optimizers with different delays, checked against the closed
form of plain SGD (u⁽ⁿ⁾ = η g⁽ⁿ⁾, whatever the delay) in float64."""

from __future__ import annotations

import math

import pytest
import torch

from asyncpp.delay import DelayedOptimizer, DriftMeter

pytestmark = pytest.mark.usefixtures("one_thread")


def _grads(n_steps: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 2, generator=g, dtype=torch.float64),
             torch.randn(4, generator=g, dtype=torch.float64),
             torch.randn(5, generator=g, dtype=torch.float64)) for _ in range(n_steps)]


def _stages(delays=(2, 0), lr=0.5):
    """Two 'stages': stage 0 holds a (3×2) matrix and a 4-vector in two groups, stage 1 a
    5-vector; each stage its own SGD in a DelayedOptimizer with its own delay."""
    a = torch.zeros(3, 2, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    c = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    d0 = DelayedOptimizer(torch.optim.SGD([{"params": [a]}, {"params": [b]}], lr=lr),
                          delay=delays[0], track_updates=True)
    d1 = DelayedOptimizer(torch.optim.SGD([c], lr=lr), delay=delays[1], track_updates=True)
    return (a, b, c), [d0, d1]


def _closed_form(grads, lr, total):
    """ρ_n = ‖u⁽ⁿ⁾ − u⁽ⁿ⁻¹⁾‖ / ‖u⁽ⁿ⁾‖ with u⁽ⁿ⁾ = η (g_a, g_b, g_c)ₙ, n ≥ 1."""
    flat = [lr * torch.cat([x.reshape(-1) for x in gs]) for gs in grads]
    rho = [float((flat[n] - flat[n - 1]).norm() / flat[n].norm()) for n in range(1, len(flat))]
    late = [r for n, r in enumerate(rho, start=1) if 2 * n >= total]
    return flat, rho, late


def _run(params, dopts, grads, meter, start=0, stop=None):
    pairs = []
    for gs in grads[start:stop]:
        for p, g in zip(params, gs):
            p.grad = g.clone()
        for d in dopts:
            d.step()
        pairs += meter.collect(dopts)
    return pairs


def test_ordinal_alignment_across_delays_matches_the_closed_form():
    T, lr = 9, 0.5
    grads = _grads(T)
    params, dopts = _stages(delays=(2, 0), lr=lr)
    meter = DriftMeter.for_optimizers(dopts, T)
    pairs = _run(params, dopts, grads, meter)
    # Stage 0 lags two steps: only T-2 updates are complete before the flush.
    assert len(pairs) == T - 2
    for d in dopts:
        d.flush()
    pairs += meter.collect(dopts)
    assert len(pairs) == T and all(not q for q in meter.fifos)
    flat, rho, late = _closed_form(grads, lr, T)
    for n, (u2, d2) in enumerate(pairs):
        assert math.isclose(math.sqrt(u2), float(flat[n].norm()), rel_tol=1e-12)
        prev = flat[n - 1] if n else torch.zeros_like(flat[n])
        assert math.isclose(math.sqrt(d2), float((flat[n] - prev).norm()), rel_tol=1e-12)
    got = [meter.add(u2, d2) for u2, d2 in pairs]
    assert got[0] is None  # the first update has no predecessor
    assert got[1:] == pytest.approx(rho, rel=1e-12)
    s = meter.summary()
    assert s["drift_updates"] == T
    assert s["drift_ratio_mean"] == pytest.approx(sum(rho) / len(rho), rel=1e-12)
    assert s["drift_ratio_mean_second_half"] == pytest.approx(sum(late) / len(late), rel=1e-12)


def test_step_record_averages_the_updates_of_a_step():
    meter = DriftMeter(1, 4)
    assert meter.step_record([]) == {}
    rec = meter.step_record([(4.0, 4.0)])  # n = 0: norms, no ratio
    assert rec == {"update_norm": 2.0, "drift_norm": 2.0}
    rec = meter.step_record([(4.0, 1.0), (16.0, 4.0)])  # ρ = 1/2 and 2/4
    assert rec == {"update_norm": 3.0, "drift_norm": 1.5, "drift_ratio": 0.5}
    assert meter.summary() == {"drift_ratio_mean": 0.5, "drift_ratio_mean_second_half": 0.5,
                               "drift_updates": 3}


def test_state_round_trip_mid_run_gives_the_same_summary():
    T = 10
    grads = _grads(T, seed=3)
    params, dopts = _stages()
    meter = DriftMeter.for_optimizers(dopts, T)
    for u2, d2 in _run(params, dopts, grads, meter, stop=4):
        meter.add(u2, d2)
    assert any(meter.fifos)  # stage 1 is ahead: partial updates are pending
    saved = [d.state_dict() for d in dopts], meter.state_dict()

    params2, dopts2 = _stages()
    for p, q in zip(params2, params):
        p.data.copy_(q.detach())
    for d, st in zip(dopts2, saved[0]):
        d.load_state_dict(st)
    meter2 = DriftMeter.for_optimizers(dopts2, T)
    meter2.load_state_dict(saved[1])
    for prm, dop, met in ((params, dopts, meter), (params2, dopts2, meter2)):
        for u2, d2 in _run(prm, dop, grads, met, start=4):
            met.add(u2, d2)
        for d in dop:
            d.flush()
        for u2, d2 in met.collect(dop):
            met.add(u2, d2)
    assert meter2.summary() == meter.summary()
    _, rho, _ = _closed_form(grads, 0.5, T)
    assert meter.summary()["drift_ratio_mean"] == pytest.approx(sum(rho) / len(rho), rel=1e-12)


def test_excluded_parameters_do_not_count_and_the_trajectory_is_unchanged():
    T = 5
    grads = _grads(T, seed=5)
    params, dopts = _stages(delays=(1, 1))
    dopts[1].exclude_from_stats([params[2]])
    ref_params, ref_dopts = _stages(delays=(1, 1))
    for d in ref_dopts:
        d.track_updates = False
    meter = DriftMeter.for_optimizers(dopts, T)
    pairs = _run(params, dopts, grads, meter)
    _run(ref_params, ref_dopts, grads, DriftMeter(3, T))
    for d in (*dopts, *ref_dopts):
        d.flush()
    pairs += meter.collect(dopts)
    for p, q in zip(params, ref_params):
        assert torch.equal(p, q)  # tracking never changes the weights
    only_stage0 = [0.5 * torch.cat([gs[0].reshape(-1), gs[1]]) for gs in grads]
    assert [math.sqrt(u2) for u2, _ in pairs] == pytest.approx(
        [float(v.norm()) for v in only_stage0], rel=1e-12)


def test_pop_stats_drains_and_bad_use_is_refused():
    params, dopts = _stages(delays=(0, 0))
    for p, g in zip(params, _grads(1)[0]):
        p.grad = g
    for d in dopts:
        d.step()
    assert len(dopts[0].pop_stats()) == 2 and dopts[0].pop_stats() == []
    untracked = DelayedOptimizer(torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=1.0))
    with pytest.raises(ValueError, match="track_updates=True"):
        DriftMeter.for_optimizers([untracked], 3)
    with pytest.raises(ValueError, match="slot"):
        DriftMeter(0, 3)
    with pytest.raises(ValueError, match="slots"):
        DriftMeter(2, 3).load_state_dict(DriftMeter(3, 3).state_dict())
    with pytest.raises(ValueError, match="parameter groups"):
        DriftMeter(2, 3).collect(dopts)


def test_spectral_drift_is_t2s_drift_and_the_frobenius_ratio_can_understate_it():
    """SpectralDrift measures δ_n = ‖u⁽ⁿ⁾ − u⁽ⁿ⁻¹⁾‖₂/η per matrix; on a rank-one change of an
    orthogonal-like update the Frobenius ratio ρ_n is √n times smaller than δ_n (the √rank gap
    stated in asyncpp.delay.drift)."""
    from asyncpp.delay.drift import SpectralDrift

    n, lr, c = 4, 0.5, 0.3
    W = torch.zeros(n, n, dtype=torch.float64, requires_grad=True)
    d = DelayedOptimizer(torch.optim.SGD([W], lr=lr), delay=1, track_updates=True)
    meter = DriftMeter.for_optimizers([d], 3)
    spec = SpectralDrift(lr)
    g0 = torch.eye(n, dtype=torch.float64)
    g1 = g0.clone()
    g1[0, 0] += c
    pairs, deltas = [], []
    for g in (g0, g1, g1):
        W.grad = g.clone()
        d.step()
        got = meter.collect([d])
        if got:
            pairs += got
            deltas.append(spec.observe(d))
    # updates u0 = lr g0, u1 = lr g1: delta_1 = ||lr c E11||_2 / lr = c
    assert deltas[0] is None and deltas[1] == pytest.approx(c)
    rho = math.sqrt(pairs[1][1] / pairs[1][0])
    assert rho == pytest.approx(c / float(g1.norm()))
    assert deltas[1] / rho == pytest.approx(float(g1.norm()))  # ≈ √n for small c
    assert spec.mean() == pytest.approx(c)
    with pytest.raises(ValueError, match="track_updates"):
        SpectralDrift(lr).observe(DelayedOptimizer(torch.optim.SGD([W], lr=lr), delay=1))


def test_spectral_drift_divides_each_update_by_its_own_lr():
    """Under an lr schedule δ_n = ‖u⁽ⁿ⁾/η_n − u⁽ⁿ⁻¹⁾/η_{n−1}‖₂: a constant gradient under SGD
    has constant u/η = −g, so a warm-up (η doubling) is no drift at all, while dividing the
    difference by the current η would report ‖g‖₂/2; a changed gradient is measured in full."""
    from asyncpp.delay.drift import SpectralDrift

    W = torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    sgd = torch.optim.SGD([W], lr=0.1)
    d = DelayedOptimizer(sgd, delay=0, track_updates=True)
    spec = SpectralDrift(lambda g, p: sgd.param_groups[g]["lr"])
    g = torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))
    out = []
    for lr, grad in ((0.1, g), (0.2, g), (0.2, 2 * g)):
        sgd.param_groups[0]["lr"] = lr
        W.grad = grad.clone()
        d.step()
        out.append(spec.observe(d))
    assert out[0] is None
    assert out[1] < 1e-14  # (dividing the difference by 0.2 would give ‖g‖₂/2 = 1.5)
    assert out[2] == pytest.approx(3.0)  # ‖2g − g‖₂, at a constant lr
    # state survives a reload (the next value is computed against the restored update)
    W2 = torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    sgd2 = torch.optim.SGD([W2], lr=0.2)
    d2 = DelayedOptimizer(sgd2, delay=0, track_updates=True)
    spec2 = SpectralDrift(lambda g, p: sgd2.param_groups[g]["lr"])
    spec2.load_state_dict(spec.state_dict(d), d2)
    W2.grad = g.clone()
    d2.step()
    assert spec2.observe(d2) == pytest.approx(3.0)  # ‖g − 2g‖₂ = ‖g‖₂
    assert spec2.values == [out[1], pytest.approx(3.0), pytest.approx(3.0)]
