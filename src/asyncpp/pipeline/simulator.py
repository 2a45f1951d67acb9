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
reported as a deadlock (``ValueError``, naming the waiting actions in their text form).

One event loop (:func:`simulate_devices`) serves both views: a device holding one stage
(:func:`simulate`) or several (WPipe's two partitions per device, looped 1F1B); it also returns
each device's merged program, which the executor runs when a rank holds several stages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .actions import (
    KINDS,
    Action,
    Backward,
    BackwardInput,
    BackwardWeight,
    Forward,
    OptimizerStep,
    is_recv,
    is_send,
    kind_of,
    makes_input_gradient,
    on_stage,
    to_str,
)
from .registry import get_spec
from .schedules import Schedule, build


@dataclass(frozen=True)
class Interval:
    """One compute action of one stage: ``kind`` is its letter (F, B, I, W or U, see
    ``asyncpp.pipeline.actions.kind_of``)."""

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
             t_optimizer=0.0, *, t_action=0.0) -> SimResult:
    """Simulate ``schedule`` with fixed durations (scalars or one value per stage; ``t_comm`` a
    scalar latency; ``t_action`` the runtime's own cost per action, see
    :func:`simulate_devices`), one stage per device: :func:`simulate_devices` on
    ``[[0], [1], ...]``.
    Returns makespan, per-stage busy time and utilisation, bubble fraction and the compute
    intervals (for :mod:`asyncpp.pipeline.timeline`)."""
    res = simulate_devices(schedule, [[s] for s in range(schedule.num_stages)], t_forward,
                           t_backward, t_comm, t_optimizer, weight_memory=False,
                           t_action=t_action)
    return SimResult(res.makespan, res.busy, res.utilisation, res.bubble_fraction,
                     res.intervals, schedule)


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


# -- devices holding several partitions (WPipe) --------------------------------------------------


@dataclass(frozen=True)
class DeviceSimResult:
    r"""Outcome of :func:`simulate_devices`: per device, busy time, utilisation and peak
    weight-version memory (in units of the whole model's weights W: a partition of a P-stage
    schedule is W/P, and a version of it alive counts W/P)."""

    devices: tuple[tuple[int, ...], ...]
    makespan: float
    busy: tuple[float, ...]
    utilisation: tuple[float, ...]
    bubble_fraction: float
    weight_memory: tuple[float, ...]
    intervals: tuple[Interval, ...]
    schedule: Schedule
    programs: tuple[tuple[Action, ...], ...] = ()
    """Per device, its stages' actions merged in the order the device ran them: a receive
    right before the compute that needs it, a send right after the compute that produced it
    (:func:`rank_programs`)."""


def default_devices(schedule: Schedule) -> list[list[int]]:
    """One stage per device, except WPipe (device d of P/2 holds partitions d and P/2 + d) and
    ZB-V (device d of P/2 holds stages d and P − 1 − d)."""
    P = schedule.num_stages
    spec = get_spec(schedule.name)
    if spec.grouped:
        return [[d, P // 2 + d] for d in range(P // 2)]
    if spec.v_shaped:
        return [[d, P - 1 - d] for d in range(P // 2)]
    return [[s] for s in range(P)]


def looped_devices(num_stages: int, num_devices: int) -> list[list[int]]:
    """Looped placement (interleaved 1F1B): stage s on device s mod D, so each device holds
    P/D stages spread along the model (device d: d, d + D, d + 2D, ...)."""
    if not (num_devices >= 1 and num_stages % num_devices == 0):
        raise ValueError(f"a looped placement needs the {num_stages} stages to be a multiple of "
                         f"the {num_devices} devices")
    return [list(range(d, num_stages, num_devices)) for d in range(num_devices)]


def rank_programs(schedule: Schedule, devices: Sequence[Sequence[int]], t_forward=1.0,
                  t_backward=2.0, t_comm=0.0, t_optimizer=0.0) -> list[tuple[Action, ...]]:
    """Each device's program: its stages' actions merged in the order :func:`simulate_devices`
    runs them. The merged order is a linear extension of the dependencies (program order and
    send → receive) that the simulation proved acyclic, so a rank that runs it with blocking
    receives and non-blocking sends cannot deadlock, whatever the real durations are."""
    return list(simulate_devices(schedule, devices, t_forward, t_backward, t_comm,
                                 t_optimizer).programs)


def simulate_devices(schedule: Schedule, devices: Sequence[Sequence[int]] | None = None,
                     t_forward=1.0, t_backward=2.0, t_comm=0.0,
                     t_optimizer=0.0, *, weight_memory: bool = True,
                     t_action=0.0, t_weight=None) -> DeviceSimResult:
    r"""Simulate ``schedule`` on devices that each run one or more of its stages (partitions)
    one action at a time: each stage keeps its own action order, and a device runs, among its
    stages' next compute actions, the one that can start first (non-preemptive list scheduling:
    the globally earliest start is taken next, so no later event is simulated before an
    earlier one; ties go to a backward, then to the later stage). This greedy order is ours,
    not necessarily the best one: it leaves WPipe a small bubble at 4 devices and more (see
    ``benchmarks/bench_wpipe.py``). Durations are per stage
    (scalars or one per stage); a send costs its sender nothing (asynchronous) and arrives
    ``t_comm`` later, also between stages of one device. This is the one event loop of the
    simulator: :func:`simulate` is this with one stage per device.

    ``t_action`` (per stage; default 0) is a runtime's own device time per action — dispatch,
    posting a send or a receive, bookkeeping — charged to every action of the program,
    sends and receives included: a send leaves ``t_action`` after the compute before it and
    arrives ``t_comm`` later; a compute action lasts its work plus ``t_action``, plus
    ``t_action`` for each receive it follows (a receive is completed when its data is read).
    Busy time counts it (the device is occupied). With ``t_action = 0`` sends and receives take no
    device time, as above.

    ``t_weight`` (per stage; default ``None``: half of ``t_backward``) is the weight-gradient
    part of a backward, for schedules that split it (ZB-H1, ZB-V): the weight half costs
    :math:`t_w` and the input half :math:`t_b - t_w`, together one backward, as measured.

    Weight-version memory of a device: the most, over time, of
    :math:`\sum_{s \in d} \text{alive}_s(t) / P` (``Schedule.version_plan(s).alive_after`` at
    the end of each action), in units of the model's weights W."""
    P = schedule.num_stages
    devs = [list(d) for d in (devices if devices is not None else default_devices(schedule))]
    owner = {}
    for k, d in enumerate(devs):
        for s in d:
            if s in owner or not 0 <= s < P:
                raise ValueError(f"devices {devs} must partition the stages 0..{P - 1}")
            owner[s] = k
    if len(owner) != P:
        raise ValueError(f"devices {devs} must partition the stages 0..{P - 1}")
    tf = _per_stage(t_forward, P, "t_forward")
    tb = _per_stage(t_backward, P, "t_backward")
    to = _per_stage(t_optimizer, P, "t_optimizer")
    ta = _per_stage(t_action, P, "t_action")
    tc = float(t_comm)
    if not tc >= 0:
        raise ValueError(f"t_comm must be >= 0, got {t_comm!r}")
    # a split backward's two halves sum to one backward (the weight half does not re-walk
    # the graph); without a measured weight part, half each
    tw = [b / 2 for b in tb] if t_weight is None else _per_stage(t_weight, P, "t_weight")
    if any(not 0 <= w <= b for w, b in zip(tw, tb)):
        raise ValueError(f"t_weight must lie in [0, t_backward] per stage, got {t_weight!r}")
    cost = {KINDS[Forward]: tf, KINDS[Backward]: tb,
            KINDS[BackwardInput]: [b - w for b, w in zip(tb, tw)], KINDS[BackwardWeight]: tw,
            KINDS[OptimizerStep]: to}
    D = len(devs)
    clock = [0.0] * D
    busy = [0.0] * D
    ready = [0.0] * P
    pos = [0] * P
    arrivals: dict[tuple, float] = {}
    intervals: list[Interval] = []
    # (weight_memory=False: hand-built schedules without a registered name have no plan)
    plans = [schedule.version_plan(s).alive_after if weight_memory
             else (0,) * len(schedule.actions[s]) for s in range(P)]
    events: list[list[tuple[float, int, int]]] = [[] for _ in range(D)]  # (time, stage, alive)
    programs: list[list[Action]] = [[] for _ in range(D)]
    held_recvs: list[list[Action]] = [[] for _ in range(P)]
    owed = [0.0] * P  # t_action of receives not yet charged
    for s in range(P):
        events[owner[s]].append((0.0, s, plans[s][0] if plans[s] else 1))
    while True:
        # Sends and satisfiable receives take no device time (but t_action).
        for s in range(P):
            acts = schedule.actions[s]
            k = owner[s]
            while pos[s] < len(acts):
                a = acts[pos[s]]
                if is_send(a):
                    if ta[s]:
                        ready[s] = clock[k] = max(clock[k], ready[s]) + ta[s]
                        busy[k] += ta[s]
                    arrivals[(a.kind, a.step, a.mb, s, a.peer)] = ready[s] + tc
                    programs[k].append(on_stage(a, s))
                elif is_recv(a):
                    key = (a.kind, a.step, a.mb, a.peer, s)
                    if key not in arrivals:
                        break
                    ready[s] = max(ready[s], arrivals.pop(key))
                    owed[s] += ta[s]  # paid by the compute that reads it
                    held_recvs[s].append(on_stage(a, s))
                else:
                    break
                pos[s] += 1
        best = None
        for s in range(P):
            acts = schedule.actions[s]
            if pos[s] >= len(acts) or is_recv(acts[pos[s]]):
                continue
            start = max(clock[owner[s]], ready[s])
            # ties: a backward first (it frees activations and versions), then the later
            # partition (WPipe's G1 drains every step: it is the critical path)
            key = (start, 0 if makes_input_gradient(acts[pos[s]]) else 1, -s)
            if best is None or key < best[0]:
                best = (key, s)
        if best is None:
            stuck = [to_str(schedule.actions[s][pos[s]], s) for s in range(P)
                     if pos[s] < len(schedule.actions[s])]
            if stuck:
                where = "" if all(len(d) == 1 for d in devs) else f" on devices {devs}"
                raise ValueError(f"schedule {schedule.name!r} deadlocks{where}; waiting "
                                 f"actions: {', '.join(stuck)}")
            break
        start, s = best[0][0], best[1]
        k = owner[s]
        a = schedule.actions[s][pos[s]]
        kind = kind_of(a)
        times = cost[kind]
        dur = times[s] + ta[s] + owed[s]
        owed[s] = 0.0
        intervals.append(Interval(s, start, start + dur, kind, a.step, a.mb))
        # a receive joins the device's program right before the compute that needs it
        programs[k].extend(held_recvs[s])
        held_recvs[s] = []
        programs[k].append(on_stage(a, s))
        clock[k] = ready[s] = start + dur
        busy[k] += dur
        events[k].append((start + dur, s, plans[s][pos[s]]))
        pos[s] += 1
    makespan = max(clock) if clock else 0.0
    memory = []
    for k in range(D):
        alive: dict[int, int] = {}
        peak = 0.0
        evs = sorted(events[k], key=lambda e: e[0])  # stable: a stage's own order is kept
        for i, (t, s, n) in enumerate(evs):
            alive[s] = n
            # measure once all changes at this instant are in
            if i + 1 == len(evs) or evs[i + 1][0] > t:
                peak = max(peak, sum(alive.values()) / P)
        memory.append(peak)
    util = tuple(b / makespan if makespan > 0 else 0.0 for b in busy)
    bubble = 1.0 - sum(busy) / (D * makespan) if makespan > 0 else 0.0
    for s in range(P):
        programs[owner[s]].extend(held_recvs[s])
    return DeviceSimResult(tuple(tuple(d) for d in devs), makespan, tuple(busy), util, bubble,
                           tuple(memory), tuple(intervals), schedule,
                           tuple(tuple(p) for p in programs))


def steady_state_devices(name: str, num_stages: int, num_microbatches: int, t_forward=1.0,
                         t_backward=2.0, t_comm=0.0, warm_steps: int = 4
                         ) -> tuple[float, float]:
    r"""(bubble fraction, weight-version memory per device) of one more step in a long run on
    :func:`default_devices`: the bubble as in :func:`steady_state_bubble` (runs of
    ``warm_steps`` + 1 and ``warm_steps`` steps), the memory the most any device holds, in
    units of the model's weights W."""
    a = simulate_devices(build(name, num_stages, num_microbatches, warm_steps), None,
                         t_forward, t_backward, t_comm)
    b = simulate_devices(build(name, num_stages, num_microbatches, warm_steps + 1), None,
                         t_forward, t_backward, t_comm)
    d_time = b.makespan - a.makespan
    d_busy = sum(b.busy) - sum(a.busy)
    bubble = 1.0 - d_busy / (len(b.devices) * d_time) if d_time > 0 else 0.0
    return bubble, max(b.weight_memory)
