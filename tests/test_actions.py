"""Actions as a program's instructions: the text form and its parser, ``check()`` naming the
offending action, one program class per schedule, and the per-rank programs of several stages
per rank (the merged order the executor runs)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncpp.pipeline import PIPELINE_SCHEDULES, PROGRAMS, build, timeline
from asyncpp.pipeline.actions import (
    ACTIVATION,
    COMPUTE,
    GRADIENT,
    Backward,
    Forward,
    OptimizerStep,
    Recv,
    Send,
    check,
    from_str,
    to_str,
)
from asyncpp.pipeline.registry import get_spec
from asyncpp.pipeline.simulator import (
    default_devices,
    looped_devices,
    rank_programs,
    simulate,
    simulate_devices,
)


def _schedules():
    for name in PIPELINE_SCHEDULES:
        for P in range(1, 7):
            if get_spec(name).stages_error(P):  # WPipe and ZB-V need an even P
                continue
            for m in sorted({max(1, P - 1), P, 2 * P + 1}):
                yield build(name, P, m, 3, start_step=1)


def test_text_form_round_trips_on_every_action_of_every_schedule():
    n = 0
    for sched in _schedules():
        for s, acts in enumerate(sched.actions):
            for a in acts:
                assert a.stage == s
                text = to_str(a)
                assert from_str(text) == a, text
                assert str(a) == text
                n += 1
    assert n > 5000


@settings(max_examples=200, deadline=None)
@given(stage=st.none() | st.integers(0, 99), step=st.integers(0, 10 ** 6),
       mb=st.integers(0, 999), version=st.integers(0, 10 ** 6), delay=st.integers(0, 31),
       extra=st.integers(0, 3), per_mb=st.booleans(), peer=st.integers(0, 99),
       kind=st.sampled_from([ACTIVATION, GRADIENT]))
def test_text_form_round_trips_on_any_action(stage, step, mb, version, delay, extra, per_mb,
                                             peer, kind):
    u = step + mb
    for a in (Forward(step, mb, version, stage=stage), Backward(step, mb, version, stage=stage),
              Send(kind, step, mb, peer, stage=stage), Recv(kind, step, mb, peer, stage=stage),
              OptimizerStep(step, mb if per_mb else None, u, version, delay, u + 1 + extra,
                            stage=stage)):
        assert from_str(to_str(a)) == a


def test_text_form_examples_and_errors():
    assert from_str("1F2.3@v1") == Forward(2, 3, 1, stage=1)
    assert from_str("0U2@v1#2d1") == OptimizerStep(2, None, 2, 1, 1, 3, stage=0)
    assert from_str("3U1.0@v0#4d2") == OptimizerStep(1, 0, 4, 0, 2, 5, stage=3)
    assert from_str("0Sa2.3>1") == Send(ACTIVATION, 2, 3, 1, stage=0)
    assert from_str("1Rg2.3<2") == Recv(GRADIENT, 2, 3, 2, stage=1)
    assert to_str(Forward(0, 1, 0), stage=4) == "4F0.1@v0"
    for bad in ("1F2@v1", "F2.3", "0Sa2.3<1", "1Ra2.3>0", "2X0.0@v0", "", "1F2.3@v1 extra"):
        with pytest.raises(ValueError, match="not a pipeline action"):
            from_str(bad)


def _without(sched, stage, pred):
    acts = [list(a) for a in sched.actions]
    acts[stage] = [a for a in acts[stage] if not pred(a)]
    return dataclasses.replace(sched, actions=tuple(tuple(a) for a in acts))


def test_check_names_the_offending_action_in_text_form():
    s = build("2bw", 3, 3, 2)
    dropped_send = _without(s, 0, lambda a: isinstance(a, Send) and (a.step, a.mb) == (1, 2))
    with pytest.raises(ValueError, match=r"receive 1Ra1\.2<0 has no matching send"):
        check(dropped_send)
    dropped_recv = _without(s, 2, lambda a: isinstance(a, Recv) and (a.step, a.mb) == (0, 1))
    with pytest.raises(ValueError, match=r"send 1Sa0\.1>2 has no matching receive"):
        check(dropped_recv)
    dropped_bwd = _without(s, 1, lambda a: isinstance(a, Backward) and (a.step, a.mb) == (1, 0))
    with pytest.raises(ValueError, match=r"1U1@v0#1d1: stage 1: update 1 before its backwards"):
        check(dropped_bwd)
    acts = [list(a) for a in s.actions]
    k = next(i for i, a in enumerate(acts[0]) if isinstance(a, Forward) and a.step == 1)
    acts[0][k] = dataclasses.replace(acts[0][k], version=5)
    with pytest.raises(ValueError, match=r"0F1\.0@v5: stage 0 forwards .* before it exists"):
        check(dataclasses.replace(s, actions=tuple(map(tuple, acts))))
    moved = [list(a) for a in s.actions]
    moved[1].append(moved[0].pop())
    with pytest.raises(ValueError, match=r"action 0U1@v0#1d1 is in stage 1's program"):
        check(dataclasses.replace(s, actions=tuple(map(tuple, moved))))


def test_one_program_class_per_schedule():
    assert set(PROGRAMS) == set(PIPELINE_SCHEDULES)
    assert len({cls for cls in PROGRAMS.values()}) == len(PROGRAMS)
    assert all(cls.name == name for name, cls in PROGRAMS.items())


@pytest.mark.parametrize("name, P, m, devices", [
    ("wpipe", 4, 3, None), ("wpipe", 8, 8, None), ("1f1b", 4, 4, looped_devices(4, 2)),
    ("1f1b", 6, 5, looped_devices(6, 3)), ("2bw", 4, 3, looped_devices(4, 2)),
    ("gpipe", 4, 2, [[0, 1], [2, 3]]),
])
def test_rank_programs_are_each_stages_program_interleaved(name, P, m, devices):
    sched = build(name, P, m, 3)
    devs = default_devices(sched) if devices is None else devices
    progs = rank_programs(sched, devs)
    assert len(progs) == len(devs)
    for prog, stages in zip(progs, devs):
        assert {a.stage for a in prog} == set(stages)
        for s in stages:  # each stage's own order is kept
            assert tuple(a for a in prog if a.stage == s) == sched.actions[s]
        # a receive comes right before the compute that needs it (or another receive)
        for a, b in zip(prog, prog[1:]):
            if isinstance(a, Recv):
                assert isinstance(b, (Recv, *COMPUTE)), (to_str(a), to_str(b))
    # the merged programs run: ranks with blocking receives in this order, whatever the
    # durations, reach the same end (the simulation of the merged order completes)
    merged = dataclasses.replace(sched, num_stages=len(devs), actions=tuple(
        tuple(_as_rank_action(a, devs) for a in p) for p in progs))
    assert simulate(merged, t_forward=0.3, t_backward=1.7, t_comm=0.2).makespan > 0


def _as_rank_action(a, devs):
    """The action as a rank's: peers named by their rank, messages within a rank kept as
    sends/receives to itself (the simulator only matches keys)."""
    rank = {s: r for r, d in enumerate(devs) for s in d}
    if isinstance(a, (Send, Recv)):
        # keep messages distinct per stage pair: fold the stages into the microbatch field
        return dataclasses.replace(a, peer=rank[a.peer], stage=None,
                                   mb=(a.mb, min(a.stage, a.peer)))
    return dataclasses.replace(a, stage=None)


def test_grid_and_simulate_is_one_stage_per_device():
    s = build("wpipe", 4, 3, 2)
    text = timeline.grid(s)
    lines = text.splitlines()
    assert "rank 0 (0,2)" in lines[0] and "rank 1 (1,3)" in lines[0]
    assert lines[1].split("|")[1].strip() == "0F0.0@v0"
    cells = {c.strip() for line in lines[1:] for c in line.split("|")[1:]} - {""}
    assert cells == {to_str(a) for acts in s.actions for a in acts if isinstance(a, COMPUTE)}
    b = build("2bw", 3, 4, 3)
    one = simulate(b, [1, 2, 1], 2.5, 0.25, 0.5)
    dev = simulate_devices(b, [[0], [1], [2]], [1, 2, 1], 2.5, 0.25, 0.5)
    assert (one.makespan, one.busy, one.bubble_fraction) == (dev.makespan, dev.busy,
                                                             dev.bubble_fraction)
    assert sorted(one.intervals, key=repr) == sorted(dev.intervals, key=repr)


@pytest.mark.parametrize("m", [2, 4, 8])
def test_looped_1f1b_on_two_devices_has_the_interleaved_bubble(m):
    """Two stages per device (half the work each): the bubble of one 1F1B step is
    (D − 1)/(v·m + D − 1) with v = 2 chunks per device (Megatron's interleaved 1F1B), against
    plain 1F1B's (D − 1)/(m + D − 1). (On three devices or more the simulator's greedy merge
    of the stages' own 1F1B orders is not Megatron's interleaved order and can lose to plain
    1F1B: D = 3, m = 8 gives 0.213 against 0.2.)"""
    D = 2
    looped = simulate_devices(build("1f1b", 2 * D, m, 1), looped_devices(2 * D, D),
                              0.5, 1.0).bubble_fraction
    plain = simulate_devices(build("1f1b", D, m, 1), None, 1.0, 2.0).bubble_fraction
    assert plain == pytest.approx((D - 1) / (m + D - 1))
    assert looped == pytest.approx((D - 1) / (2 * m + D - 1))
    with pytest.raises(ValueError, match="multiple of"):
        looped_devices(5, 2)


def test_cli_prints_the_grid(capsys):
    from asyncpp.pipeline import cli

    assert cli.main(["--schedule", "wpipe", "--stages", "4", "--microbatches", "3",
                     "--steps", "1", "--grid"]) == 0
    out = capsys.readouterr().out
    assert "rank 0 (0,2) | rank 1 (1,3)" in out and "0U0@v0#0d1" in out and "3U0@v0#0d0" in out
    assert cli.main(["--schedule", "1f1b", "--stages", "2", "--microbatches", "2"]) == 0
    assert "rank 0" not in capsys.readouterr().out
