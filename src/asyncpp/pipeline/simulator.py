r"""Timing simulator: run a schedule's action lists against fixed durations.

Every stage executes its list in order. A forward takes :math:`t_f` (per stage or one value), a
backward :math:`t_b`, an update :math:`t_o`; a send costs its sender nothing (asynchronous) and
its message arrives :math:`t_c` later; a receive waits for that arrival. Hence, with
:math:`c_s` the clock of stage s,

.. math::
    \text{recv: } c_s \leftarrow \max(c_s,\ \text{sent} + t_c), \qquad
    \text{compute: } [c_s,\ c_s + t)\ \text{busy},\ c_s \leftarrow c_s + t,

makespan :math:`T = \max_s c_s`, utilisation :math:`\text{busy}_s / T` and bubble fraction
:math:`1 - \sum_s \text{busy}_s / (P\,T)`. A schedule whose receives can never be satisfied is
reported as a deadlock (``ValueError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .schedules import Backward, Forward, OptimizerStep, Recv, Schedule, Send, build


@dataclass(frozen=True)
class Interval:
    """One compute action of one stage: ``kind`` is "F", "B" or "U" (update)."""

    stage: int
    start: float
    end: float
    kind: str
    step: int
    mb: int | None


@dataclass(frozen=True)
class SimResult:
    """Outcome of :func:`simulate`."""

    makespan: float
    busy: tuple[float, ...]
    utilisation: tuple[float, ...]
    bubble_fraction: float
    intervals: tuple[Interval, ...]
    schedule: Schedule


def _per_stage(value, num_stages: int, label: str) -> list[float]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        vals = [float(v) for v in value]
        if len(vals) != num_stages:
            raise ValueError(f"{label} has {len(vals)} entries for {num_stages} stages")
    else:
        vals = [float(value)] * num_stages
    for v in vals:
        if not v >= 0:
            raise ValueError(f"{label} must be >= 0, got {value!r}")
    return vals


def simulate(schedule: Schedule, t_forward=1.0, t_backward=2.0, t_comm=0.0,
             t_optimizer=0.0) -> SimResult:
    """Simulate ``schedule`` with fixed durations (scalars or one value per stage; ``t_comm`` a
    scalar latency). Returns makespan, per-stage busy time and utilisation, bubble fraction and
    the compute intervals (for :mod:`asyncpp.pipeline.timeline`)."""
    P = schedule.num_stages
    tf = _per_stage(t_forward, P, "t_forward")
    tb = _per_stage(t_backward, P, "t_backward")
    to = _per_stage(t_optimizer, P, "t_optimizer")
    tc = float(t_comm)
    if not tc >= 0:
        raise ValueError(f"t_comm must be >= 0, got {t_comm!r}")
    clock = [0.0] * P
    busy = [0.0] * P
    pos = [0] * P
    arrivals: dict[tuple, float] = {}
    intervals: list[Interval] = []
    remaining = sum(len(a) for a in schedule.actions)
    while remaining:
        progressed = False
        for s in range(P):
            acts = schedule.actions[s]
            while pos[s] < len(acts):
                a = acts[pos[s]]
                if isinstance(a, Send):
                    arrivals[(a.kind, a.step, a.mb, s, a.peer)] = clock[s] + tc
                elif isinstance(a, Recv):
                    key = (a.kind, a.step, a.mb, a.peer, s)
                    if key not in arrivals:
                        break
                    clock[s] = max(clock[s], arrivals.pop(key))
                else:
                    if isinstance(a, Forward):
                        dur, kind, mb = tf[s], "F", a.mb
                    elif isinstance(a, Backward):
                        dur, kind, mb = tb[s], "B", a.mb
                    else:
                        assert isinstance(a, OptimizerStep)
                        dur, kind, mb = to[s], "U", a.mb
                    intervals.append(Interval(s, clock[s], clock[s] + dur, kind, a.step, mb))
                    clock[s] += dur
                    busy[s] += dur
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {s: schedule.actions[s][pos[s]] for s in range(P)
                     if pos[s] < len(schedule.actions[s])}
            raise ValueError(f"schedule {schedule.name!r} deadlocks; waiting actions: {stuck}")
    makespan = max(clock) if clock else 0.0
    util = tuple(b / makespan if makespan > 0 else 0.0 for b in busy)
    bubble = 1.0 - sum(busy) / (P * makespan) if makespan > 0 else 0.0
    return SimResult(makespan, tuple(busy), util, bubble, tuple(intervals), schedule)


def steady_state_bubble(name: str, num_stages: int, num_microbatches: int, t_forward=1.0,
                        t_backward=2.0, t_comm=0.0, warm_steps: int = 4) -> float:
    r"""Bubble fraction of one more step in a long run:
    :math:`1 - \sum_s \Delta\text{busy}_s / (P\,\Delta T)`, where Δ compares runs of
    ``warm_steps`` + 1 and ``warm_steps`` steps (fill and drain cancel). 1F1B/GPipe:
    :math:`(P-1)/(m+P-1)` (with :math:`t_c = 0`); 2BW and PipeDream: 0."""
    a = simulate(build(name, num_stages, num_microbatches, warm_steps), t_forward, t_backward,
                 t_comm)
    b = simulate(build(name, num_stages, num_microbatches, warm_steps + 1), t_forward,
                 t_backward, t_comm)
    d_time = b.makespan - a.makespan
    d_busy = sum(b.busy) - sum(a.busy)
    return 1.0 - d_busy / (num_stages * d_time) if d_time > 0 else 0.0
