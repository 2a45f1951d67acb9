"""Schedules as data, the timing simulator, the timeline and the CLI — no communication."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncpp.delay import DelayedOptimizer
from asyncpp.pipeline import (
    SCHEDULES,
    Backward,
    Forward,
    OptimizerStep,
    Recv,
    Send,
    build,
    cli,
    simulate,
    steady_state_bubble,
    timeline,
    version_of,
)
from asyncpp.pipeline.actions import COMPUTE
from asyncpp.pipeline.schedules import check


@pytest.mark.parametrize("P", [1, 2, 4, 8])
@pytest.mark.parametrize("mult", [1, 2, 4])
def test_properties_from_the_data(P, mult):
    m = P * mult
    for name in SCHEDULES:
        if name in ("wpipe", "zb-v") and P % 2:
            with pytest.raises(ValueError, match="even number of stages"):
                build(name, P, m, 3)
            continue
        s = build(name, P, m, 3)
        if name == "wpipe":
            # G0 (first half): 2BW's delay and two versions; G1 drains: delay 0, one version
            assert s.delays() == [frozenset({1})] * (P // 2) + [frozenset({0})] * (P // 2)
            assert s.versions_held() == [2] * (P // 2) + [1] * (P // 2)
        elif name == "2bw":
            assert s.delays() == [frozenset({1})] * P
            assert s.versions_held() == [2] * P
        elif name == "pipedream":
            assert s.delays() == [frozenset({P - 1 - k}) for k in range(P)]
            assert s.versions_held() == [P - k for k in range(P)]
        else:
            assert s.delays() == [frozenset({0})] * P
            assert s.versions_held() == [1] * P
        peak = s.peak_activations()
        # zb-h1: a stage's waiting weight halves keep their microbatches, up to the first
        # stage's P — 1F1B's peak on every stage
        assert peak == ([m] * P if name == "gpipe" else [min(m, P - k) for k in range(P)]
                        if name == "1f1b" else [min(m, P)] * P if name in ("zb-h1", "zb-v")
                        else [P - k for k in range(P)])


@pytest.mark.parametrize("P", [2, 4, 8])
@pytest.mark.parametrize("mult", [1, 2, 4])
def test_bubble_fractions(P, mult):
    m = P * mult
    formula = (P - 1) / (m + P - 1)
    for name in ("gpipe", "1f1b"):
        assert simulate(build(name, P, m, 1)).bubble_fraction == pytest.approx(formula)
        assert steady_state_bubble(name, P, m) == pytest.approx(formula)
        assert simulate(build(name, P, m, 1)).bubble_fraction == pytest.approx(formula)
    for name in ("2bw", "pipedream"):
        assert steady_state_bubble(name, P, m) == pytest.approx(0.0, abs=1e-12)
        # A run of N steps only pays one fill and one drain: (P−1)/(N·m + P − 1).
        n = 5
        assert simulate(build(name, P, m, n)).bubble_fraction == pytest.approx(
            (P - 1) / (n * m + P - 1))


def test_simulator_per_stage_times_and_latency():
    s = build("1f1b", 3, 6, 1)
    res = simulate(s, t_forward=[1, 2, 1], t_backward=[2, 4, 2], t_comm=0.5, t_optimizer=0.25)
    assert res.busy[1] == pytest.approx(6 * 6 + 0.25)
    assert res.makespan > max(res.busy)
    assert all(0 < u <= 1 for u in res.utilisation)
    with pytest.raises(ValueError, match="t_forward has 2 entries"):
        simulate(s, t_forward=[1, 2])
    with pytest.raises(ValueError, match="t_comm"):
        simulate(s, t_comm=-1)


def test_simulator_per_action_overhead_by_hand():
    """1F1B, P = 2, m = 1, t_f = 1, t_b = 2, t_comm = 1/4, t_action = 1/2. Stage 0: F ends
    1.5, its send 2.0, arriving 2.25. Stage 1: F (1 + 1/2 + 1/2 for the receive) ends 4.25,
    B 6.75, the send 7.25 (arriving 7.5), U 7.75. Stage 0: B (2 + 1/2 + 1/2) ends 10.5, U 11."""
    s = build("1f1b", 2, 1, 1)
    assert simulate(s, 1.0, 2.0, 0.25).makespan == 6.5
    res = simulate(s, 1.0, 2.0, 0.25, t_action=0.5)
    assert res.makespan == 11.0
    # stage 0 runs five actions, each costing its work plus 1/2: 1 + 2 + 5/2
    assert res.busy == (5.5, 5.5)
    with pytest.raises(ValueError, match="t_action must be >= 0"):
        simulate(s, t_action=-1)


def test_sends_match_receives_and_deadlock_detection():
    s = build("2bw", 4, 4, 3)
    sends = {(a.kind, a.step, a.mb, k, a.peer) for k, acts in enumerate(s.actions)
             for a in acts if isinstance(a, Send)}
    recvs = {(a.kind, a.step, a.mb, a.peer, k) for k, acts in enumerate(s.actions)
             for a in acts if isinstance(a, Recv)}
    assert sends == recvs and len(sends) == 2 * 3 * 4 * 3
    # Drop one send: the data check and the simulator both notice.
    broken = [list(a) for a in s.actions]
    broken[0] = [a for a in broken[0] if not (isinstance(a, Send) and a.step == 0 and a.mb == 0)]
    bad = type(s)(s.name, s.num_stages, s.num_microbatches, s.num_steps, s.start_step,
                  tuple(tuple(a) for a in broken), s.next_versions)
    with pytest.raises(ValueError, match="no matching send"):
        check(bad)
    with pytest.raises(ValueError, match="deadlocks"):
        simulate(bad)
    # Receiving before sending on both sides is a deadlock.
    cyc = type(s)("x", 2, 1, 1, 0, ((Recv("gradient", 0, 0, 1), Send("activation", 0, 0, 1)),
                                    (Recv("activation", 0, 0, 0), Send("gradient", 0, 0, 0))),
                  (0, 0))
    with pytest.raises(ValueError, match="deadlocks"):
        simulate(cyc)


def test_2bw_action_details():
    s = build("2bw", 2, 2, 3)
    last = s.actions[1]
    ups = [a for a in last if isinstance(a, OptimizerStep)]
    assert [(u.update, u.version, u.delay, u.new_version, u.applied_at) for u in ups] == [
        (0, 0, 1, 1, 1), (1, 0, 1, 2, 2), (2, 1, 1, 3, 3)]
    fwd = [(a.step, a.version) for a in last if isinstance(a, Forward)]
    assert fwd == [(0, 0), (0, 0), (1, 0), (1, 0), (2, 1), (2, 1)]
    # Every backward uses its forward's version.
    for acts in s.actions:
        seen = {}
        for a in acts:
            if isinstance(a, Forward):
                seen[(a.step, a.mb)] = a.version
            if isinstance(a, Backward):
                assert seen[(a.step, a.mb)] == a.version


def test_2bw_sync_windows_flush():
    s = build("2bw", 3, 3, 8, sync_steps={0, 1, 6, 7})
    assert s.delays() == [frozenset({0, 1})] * 3
    assert s.versions_held() == [2] * 3
    # Steps 0 and 1 are synchronous: step 1 starts after step 0's update on stage 0.
    acts = s.actions[0]
    up0 = next(i for i, a in enumerate(acts) if isinstance(a, OptimizerStep) and a.step == 0)
    f1 = next(i for i, a in enumerate(acts) if isinstance(a, Forward) and a.step == 1)
    assert up0 < f1
    with pytest.raises(ValueError, match="2bw schedule only"):
        build("pipedream", 2, 2, 2, sync_steps={0})


def _updates_before(dopt_kwargs, steps, per_group=None):
    """Count, with the real DelayedOptimizer on SGD(lr=1) and gradient 1, how many updates
    each group had absorbed when each gradient was computed."""
    groups = per_group or 1
    ps = [torch.zeros((), requires_grad=True) for _ in range(groups)]
    opt = torch.optim.SGD([{"params": [p]} for p in ps], lr=1.0)
    dopt = DelayedOptimizer(opt, **dopt_kwargs)
    seen = []
    for _ in range(steps):
        seen.append([int(round(-float(p.detach()))) for p in ps])
        for p in ps:
            p.grad = torch.ones(())
        dopt.step()
    return seen


def test_version_labels_equal_delayed_optimizer_semantics():
    # 2BW, with synchronous start and cooldown windows.
    T = 12
    seen = _updates_before(dict(delay=1, sync_start=2, sync_cooldown=3, total_steps=T), T)
    sync = {t for t in range(T) if t < 2 or t >= T - 3}
    for t in range(T):
        assert version_of("2bw", 4, 4, 0, t, sync_steps=sync) == seen[t][0]
    # PipeDream: group s of P has delay P − 1 − s; every microbatch is a step.
    P, m = 4, 2
    seen = _updates_before(dict(delay=[P - 1 - s for s in range(P)]), 5 * m, per_group=P)
    for k in range(5 * m):
        for s in range(P):
            assert version_of("pipedream", P, m, s, k // m, k % m) == seen[k][s]
    seen = _updates_before(dict(delay=0), 6)
    assert [version_of("1f1b", 2, 2, 0, t) for t in range(6)] == [v[0] for v in seen]


def test_chained_builds_continue_versions():
    a = build("2bw", 2, 2, 3)
    b = build("2bw", 2, 2, 2, start_step=3)
    assert b.start_version == 3
    first = next(x for x in b.actions[0] if isinstance(x, Forward))
    assert first.version == a.next_versions[0] == 2
    p = build("pipedream", 3, 2, 2, start_step=2)
    assert p.start_version == 4


@pytest.mark.parametrize("args, match", [
    (("zb", 2, 2, 1), "unknown pipeline schedule"),
    (("2bw", 0, 2, 1), "num_stages"),
    (("2bw", 2, 0, 1), "num_microbatches"),
    (("2bw", 2, 2, 0), "num_steps"),
    (("2bw", 5, 2, 1), "num_microbatches >= 4"),
])
def test_build_errors(args, match):
    with pytest.raises(ValueError, match=match):
        build(*args)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(SCHEDULES), P=st.integers(1, 6), extra=st.integers(0, 6),
       steps=st.integers(1, 4), start=st.integers(0, 3))
def test_any_schedule_is_consistent_and_runs(name, P, extra, steps, start):
    if name in ("wpipe", "zb-v"):
        P += P % 2  # two groups of partitions, or a V: an even count
    m = max(1, P - 1) + extra
    s = build(name, P, m, steps, start_step=start)
    check(s)
    res = simulate(s)
    assert len(res.intervals) == sum(1 for acts in s.actions for a in acts
                                     if isinstance(a, COMPUTE))
    assert 0 <= res.bubble_fraction < 1
    assert max(s.versions_held()) <= (P if name == "pipedream" else 2)


def test_timeline_ascii_and_plot(tmp_path):
    s = build("2bw", 4, 8, 2)
    text = timeline.ascii(s)
    lines = text.splitlines()
    assert lines[0].startswith("2bw: P=4 m=8 steps=2")
    assert len(lines) == 5 and lines[1].startswith("stage 0 | F0 F1 F2 F3")
    assert "f0" in lines[4]  # odd step in lower case, overlapping the even one
    assert timeline.ascii(s, width=30).splitlines()[1].endswith(">")
    assert "versions" in timeline.summary(s)
    pytest.importorskip("matplotlib")
    fig = timeline.plot(simulate(s), path=tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 1000
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_cli(tmp_path, capsys):
    assert cli.main(["--schedule", "1f1b", "--stages", "4", "--microbatches", "4",
                     "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "bubble=0.429" in out and "steady-state bubble fraction: 0.4286" in out
    png = tmp_path / "s.png"
    pytest.importorskip("matplotlib")
    assert cli.main(["--schedule", "2bw", "--stages", "4", "--microbatches", "8",
                     "--png", str(png)]) == 0
    assert png.exists() and "steady-state bubble fraction: 0.0000" in capsys.readouterr().out
    assert cli.main(["--schedule", "2bw", "--stages", "5", "--microbatches", "2"]) == 2
    assert "num_microbatches >= 4" in capsys.readouterr().err


@settings(max_examples=60, deadline=None, derandomize=True)
@given(name=st.sampled_from(["gpipe", "1f1b", "2bw", "pipedream", "wpipe"]), P=st.integers(1, 5),
       m=st.integers(1, 6), T=st.integers(2, 8), cut=st.integers(0, 10 ** 6),
       sync=st.booleans())
def test_lazy_actions_with_an_end_moved_earlier_equal_the_fixed_end(name, P, m, T, cut, sync):
    """``stage_actions`` with a callable end that is moved earlier while it runs (as the
    streaming executor does to stop) yields exactly ``build``'s list for the final end —
    provided the stage has not forwarded a step at or after the new end."""
    from asyncpp.pipeline.schedules import ACTIVATION, Forward, Recv, Send, stage_actions

    if name == "wpipe":
        P += P % 2
    if name in ("2bw", "wpipe"):
        m = max(m, P - 1)
    sync_steps = {0, T - 1} if (sync and name == "2bw") else None
    for s in range(P):
        full = list(stage_actions(name, P, m, s, 0, T, sync_steps))
        # The earliest end this stage still allows after k actions: one past the latest step
        # it has started (a forward, or the receive/send of that forward's activation).
        k = cut % (len(full) + 1)
        seen = [a.step for a in full[:k] if isinstance(a, Forward)
                or (isinstance(a, (Recv, Send)) and a.kind == ACTIVATION)]
        new_end = max(seen, default=0) + 1 + (cut // (len(full) + 1)) % 2
        new_end = min(max(new_end, 1), T)
        end = {"value": T}
        gen = stage_actions(name, P, m, s, 0, lambda end=end: end["value"], sync_steps)
        got = [next(gen) for _ in range(k)]
        end["value"] = new_end
        got += list(gen)
        want = build(name, P, m, new_end, sync_steps=sync_steps if sync_steps is None
                     else {t for t in sync_steps if t < new_end}).actions[s]
        assert tuple(got) == want, (s, k, new_end)
