r"""Pipeline schedules as plain data: one list of actions per stage, testable without any
communication.

A schedule runs ``num_steps`` optimizer steps ("batches") of ``num_microbatches`` (m)
microbatches each on ``num_stages`` (P) stages. Stage s executes its list in order:

- :class:`Forward` / :class:`Backward` of microbatch i of step t on weight version v,
- :class:`Send` / :class:`Recv` of an activation (to s+1 / from s−1) or of the gradient of
  one (to s−1 / from s+1),
- :class:`OptimizerStep`: apply one accumulated gradient with a given delay.

**Weight versions.** A version label is the number of optimizer updates a stage has applied
before it: version v is :math:`x` after updates :math:`0..v-1`, and the update that consumes
gradient number u produces version u+1. With :math:`a(u) = u + \tau_u` the (simulated) step at
which gradient u is applied, the weights a forward of gradient key k uses are

.. math::
    v(k) = \#\{u : u + \tau_u < k\},

exactly the weights that ``DelayedOptimizer`` (formulation ``"gradient"``) has when it computes
gradient k: :math:`x_{t+1} = x_t - U(g_{t-\tau};\,x_t)`, nothing applied while t < τ.

The four schedules:

``gpipe``
    per step: all forwards, all backwards, one update (flush). τ = 0, 1 version.
``1f1b``
    per step: 1F1B order (stage s runs P−1−s warm-up forwards, then alternates forward and
    backward), one update (flush). τ = 0, 1 version, bubble :math:`(P-1)/(m+P-1)`.
``2bw``
    PipeDream-2BW: 1F1B order over the microbatches of *all* steps, no flush; the gradient of
    step t is accumulated over its m microbatches on version :math:`x_t` and applied with a
    one-step delay, :math:`x_{t+1} = x_t - U(g_{t-1};\,x_t)`, :math:`x_1 = x_0`. The update is
    issued as soon as the last backward of step t finishes on that stage (it only needs
    :math:`x_{t+1}` and :math:`g_t`), which keeps 2 versions per stage. Steps listed in
    ``sync_steps`` have delay 0 (synchronous start / cooldown): the pipeline drains after them.
    Needs m ≥ P − 1. Steady-state bubble 0.
``pipedream``
    original PipeDream (weight stashing): every microbatch is its own minibatch and its own
    update (no accumulation; a "step" of m microbatches performs m updates). 1F1B order, no
    flush. Stage s has delay :math:`\tau_s = P-1-s` updates and holds up to P − s versions.
``wpipe``
    WPipe (Yang et al., ICLR 2022, "Group-based interleaved pipeline parallelism in large-scale
    DNN training"), on P partitions (P even) and P/2 devices: G0 = partitions 0..P/2−1,
    G1 = P/2..P−1, device d holding partitions d and P/2 + d. Gradients are accumulated over
    the m microbatches of a step and each partition updates once per step. G1 runs 1F1B per
    step and drains (its update of step t precedes its forwards of step t+1): forward and
    backward of step t on :math:`x^{G1}_t`, :math:`\tau = 0`, one version. G0 runs 1F1B over
    the microbatches of all steps without draining — the next step's forwards through G0 are
    moved ahead of the current step's backwards (the paper's "moving operation") — so step t
    reads :math:`x^{G0}_{t-1}` (2BW's rule), :math:`\tau = 1`, two versions. Per device: 1.5
    partition-versions against 2BW's 2 (half the redundant copy), mean delay 1/2 against 2BW's
    1 — the paper's "about half of 2BW's weight memory and update latency". Needs m ≥ P − 1
    (P partitions: G0's first partition starts P − 1 forwards before its first backward).

    *Assumed* (the paper's full text was not reachable from our sources; pinned from its
    abstract and secondary descriptions — two groups of partitions, interleaved on the devices,
    the next cycle's forwards moved ahead of the current cycle's backwards, "double-grouped
    weight updates" alternating between the groups, half of 2BW's memory and latency): the
    group split (first half / second half of the partitions) and that G1 drains every step
    while G0 does not, which is the one reading in which those four facts hold together. The
    executor runs each partition as its own rank; how a device interleaves its two partitions
    (and so the bubble and the per-device memory) is measured by
    :func:`asyncpp.pipeline.simulator.simulate_devices`, not by the executor.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

from .registry import PIPELINE_SCHEDULES, get_spec

SCHEDULES = PIPELINE_SCHEDULES
ACTIVATION = "activation"
GRADIENT = "gradient"


@dataclass(frozen=True)
class Forward:
    """Forward of microbatch ``mb`` of step ``step`` on weight version ``version``."""

    step: int
    mb: int
    version: int


@dataclass(frozen=True)
class Backward:
    """Backward of microbatch ``mb`` of step ``step`` (same version as its forward)."""

    step: int
    mb: int
    version: int


@dataclass(frozen=True)
class Send:
    """Send the ``kind`` ("activation" or "gradient") of (step, mb) to stage ``peer``."""

    kind: str
    step: int
    mb: int
    peer: int


@dataclass(frozen=True)
class Recv:
    """Receive the ``kind`` ("activation" or "gradient") of (step, mb) from stage ``peer``."""

    kind: str
    step: int
    mb: int
    peer: int


@dataclass(frozen=True)
class OptimizerStep:
    r"""Apply gradient number ``update`` (computed on ``version``) with delay ``delay``.

    ``step``/``mb`` name the gradient: ``mb`` is ``None`` when it is the sum over the m
    microbatches of ``step``, an index for PipeDream's per-microbatch updates. The update is
    :math:`x_{u+1} = x_u - U(g;\,x_u)`, producing version ``new_version`` = ``update`` + 1;
    it belongs to simulated step ``update + delay``.
    """

    step: int
    mb: int | None
    update: int
    version: int
    delay: int
    new_version: int

    @property
    def applied_at(self) -> int:
        """The simulated step a(u) = u + τ at which this gradient is applied."""
        return self.update + self.delay


Action = Forward | Backward | Send | Recv | OptimizerStep


@dataclass(frozen=True)
class VersionPlan:
    """Weight-version bookkeeping of one stage's action list (derived from the data).

    ``free_after[i]``: versions no action from i+1 on (nor the next schedule) uses;
    ``keep_old[i]``: for an :class:`OptimizerStep` at i, whether the version it replaces is
    still used later (then the executor moves the new weights to fresh storage instead of
    overwriting them); ``held``: the most versions alive at once.
    """

    free_after: tuple[tuple[int, ...], ...]
    keep_old: tuple[bool, ...]
    held: int
    alive_after: tuple[int, ...] = ()
    """How many versions are alive after each action (after its frees)."""


@dataclass(frozen=True)
class Schedule:
    """Per-stage action lists of one pipeline run, plus its parameters."""

    name: str
    num_stages: int
    num_microbatches: int
    num_steps: int
    start_step: int
    actions: tuple[tuple[Action, ...], ...]
    next_versions: tuple[int, ...]
    sync_steps: frozenset[int] = field(default_factory=frozenset)

    @property
    def updates_per_step(self) -> int:
        """How many optimizer updates one step makes (m for PipeDream, 1 otherwise)."""
        return get_spec(self.name).updates_per_step(self.num_microbatches)

    @property
    def start_version(self) -> int:
        """The newest version label when the schedule starts (updates applied before it)."""
        return self.start_step * self.updates_per_step

    def delays(self) -> list[frozenset[int]]:
        """Per stage, the delays τ of its updates (2BW {1}; PipeDream {P−1−s}; sync {0})."""
        return [frozenset(a.delay for a in acts if isinstance(a, OptimizerStep))
                for acts in self.actions]

    def version_plan(self, stage: int) -> VersionPlan:
        """Liveness of weight versions on ``stage``: v is alive from its creation to its last
        use (a forward, backward or update reading it), or to the end if a later schedule
        needs it; the newest version is always alive."""
        return version_plan(self.actions[stage], self.start_version, self.next_versions[stage])

    def versions_held(self) -> list[int]:
        """Per stage, the most weight versions alive at once (2BW 2, PipeDream P − s)."""
        return [self.version_plan(s).held for s in range(self.num_stages)]

    def peak_activations(self) -> list[int]:
        r"""Per stage, the most microbatches forwarded but not yet backwarded (stashed
        activations): :math:`\max_i (\#F_{\le i} - \#B_{\le i})`."""
        out = []
        for acts in self.actions:
            live = peak = 0
            for a in acts:
                if isinstance(a, Forward):
                    live += 1
                    peak = max(peak, live)
                elif isinstance(a, Backward):
                    live -= 1
            out.append(peak)
        return out

    def check(self) -> None:
        """Raise ``ValueError`` unless the data is consistent: every send has one matching
        receive (and vice versa), every microbatch is forwarded then backwarded once on the
        same version, each update follows the backwards it consumes, and every version a
        forward reads exists by then (``v ≤`` newest)."""
        check(self)


# -- construction -----------------------------------------------------------------------------


def _validate(name: str, num_stages: int, num_microbatches: int, num_steps: int,
              start_step: int) -> str:
    spec = get_spec(name)
    if not spec.needs_pipeline:
        raise ValueError(f"schedule {name!r} has no pipeline; allowed: "
                         f"{', '.join(PIPELINE_SCHEDULES)}")
    name = spec.name
    for label, value, low in (("num_stages", num_stages, 1),
                              ("num_microbatches", num_microbatches, 1),
                              ("num_steps", num_steps, 1), ("start_step", start_step, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{label} must be an integer >= {low}, got {value!r}")
    bad = spec.stages_error(num_stages)
    if bad:
        raise ValueError(bad)
    need = spec.min_microbatches(num_stages)
    if num_microbatches < need:
        raise ValueError(
            f"{name} with {num_stages} stages needs num_microbatches >= {need} (got "
            f"{num_microbatches}) so that two weight versions suffice; raise the microbatch count"
        )
    return name


def _as_predicate(sync_steps) -> Callable[[int], bool]:
    if sync_steps is None:
        return lambda t: False
    if callable(sync_steps):
        return lambda t: bool(sync_steps(t))
    if isinstance(sync_steps, Collection):
        s = frozenset(int(t) for t in sync_steps)
        return lambda t: t in s
    raise ValueError(
        f"sync_steps must be a collection of step indices or a predicate, got {sync_steps!r}"
    )


def _order_1f1b(items: Sequence, stage: int, num_stages: int) -> list[tuple[str, object]]:
    """1F1B: P−1−s warm-up forwards, then forward/backward alternately, then the rest of the
    backwards (torch's Schedule1F1B order: P − s forwards before the first backward)."""
    warm = min(num_stages - 1 - stage, len(items))
    order: list[tuple[str, object]] = [("F", items[k]) for k in range(warm)]
    nf, nb = warm, 0
    while nf < len(items):
        order.append(("F", items[nf]))
        nf += 1
        order.append(("B", items[nb]))
        nb += 1
    order.extend(("B", items[k]) for k in range(nb, len(items)))
    return order


def build(name: str, num_stages: int, num_microbatches: int, num_steps: int = 1, *,
          start_step: int = 0, sync_steps=None) -> Schedule:
    r"""Build schedule ``name`` ("gpipe", "1f1b", "pipedream", "2bw") for P stages, m
    microbatches per step and steps ``start_step .. start_step + num_steps − 1``.

    ``sync_steps`` (2BW only): step indices, or a predicate on them, where the delay is 0
    (:math:`\tau(t) = 0`: synchronous start / cooldown, ``DelaySchedule.delay_at(t) == 0``).
    Version labels are absolute, so consecutive calls with increasing ``start_step`` chain.
    Each stage's list is :func:`stage_actions` run to the end (the executor runs the same
    generator lazily, without a fixed end).
    """
    name = _validate(name, num_stages, num_microbatches, num_steps, start_step)
    end = start_step + num_steps
    all_actions = tuple(
        tuple(stage_actions(name, num_stages, num_microbatches, s, start_step, end, sync_steps))
        for s in range(num_stages))
    is_sync = _as_predicate(sync_steps)
    next_versions = tuple(_version(name, num_stages, num_microbatches, s, end, 0, is_sync)
                          for s in range(num_stages))
    sync = frozenset(t for t in range(start_step, end)
                     if get_spec(name).sync_windows and is_sync(t))
    sched = Schedule(name, num_stages, num_microbatches, num_steps, start_step, all_actions,
                     next_versions, sync)
    check(sched)
    return sched


def stage_actions(name: str, num_stages: int, num_microbatches: int, stage: int,
                  start_step: int, end_step, sync_steps=None) -> Iterator[Action]:
    """The actions of ``stage`` for steps ``start_step ..`` up to ``end_step`` (exclusive), as
    a lazy generator: ``end_step`` is an int, or a callable read each time the stage is about
    to forward a microbatch of a new step, so a caller may move the end *earlier* while the
    generator runs (to stop a streaming run), as long as no stage has forwarded a microbatch
    of a step at or after the new end. The list is the same as for a fixed end equal to the
    final value: the 1F1B order only compares the count of forwarded microbatches with the
    count in the segment, and a smaller count that is still ≥ the forwarded count gives the
    same answers to every comparison made so far.

    Segments (runs of steps without a flush): one step for flushing schedules (gpipe, 1f1b),
    up to and including each synchronous step for 2BW, the whole run otherwise.
    """
    spec = get_spec(name)
    P, m, s = num_stages, num_microbatches, stage
    is_sync = _as_predicate(sync_steps)
    if sync_steps is not None and not spec.sync_windows:
        raise ValueError(
            f"sync_steps (synchronous start/cooldown) applies to the 2bw schedule only, not "
            f"{name!r}: gpipe/1f1b are synchronous already and pipedream has no sync windows"
        )
    end = end_step if callable(end_step) else (lambda: end_step)

    def segment_limit(t0: int) -> int:
        """Exclusive end of the segment starting at t0 for the end known now (the end only
        moves earlier, so the segment's end is the smaller of this and the current end)."""
        e = end()
        if spec.flush_every_step or spec.in_second_group(P, s):
            return t0 + 1
        if spec.sync_windows and sync_steps is not None:
            t = t0
            while t < e - 1 and not is_sync(t):
                t += 1
            return t + 1
        return e

    def forward(t: int, i: int) -> Iterator[Action]:
        if s > 0:
            yield Recv(ACTIVATION, t, i, s - 1)
        yield Forward(t, i, _version(name, P, m, s, t, i, is_sync))
        if s < P - 1:
            yield Send(ACTIVATION, t, i, s + 1)

    def backward(t: int, i: int) -> Iterator[Action]:
        v = _version(name, P, m, s, t, i, is_sync)
        if s < P - 1:
            yield Recv(GRADIENT, t, i, s + 1)
        yield Backward(t, i, v)
        if s > 0:
            yield Send(GRADIENT, t, i, s - 1)
        if spec.per_microbatch_updates:
            u = t * m + i
            yield OptimizerStep(t, i, u, v, spec.stage_delay(P, s), u + 1)
        elif i == m - 1:
            tau = spec.stage_delay(P, s) if spec.grouped else step_delay(name, t, is_sync)
            yield OptimizerStep(t, None, t, v, tau, t + 1)

    t0 = start_step
    while t0 < end():
        limit = segment_limit(t0)

        def count(t0=t0, limit=limit) -> int:
            return (min(end(), limit) - t0) * m

        def item(n: int, t0=t0) -> tuple[int, int]:
            return t0 + n // m, n % m

        nf = nb = 0
        if spec.all_forwards_first:
            n = count()
            for k in range(n):
                yield from forward(*item(k))
            for k in range(n):
                yield from backward(*item(k))
            nf = n
        else:
            warm = P - 1 - s
            while nf < min(warm, count()):
                yield from forward(*item(nf))
                nf += 1
            while nf < count():
                yield from forward(*item(nf))
                nf += 1
                yield from backward(*item(nb))
                nb += 1
            while nb < nf:
                yield from backward(*item(nb))
                nb += 1
        t0 += nf // m


def step_delay(name: str, step: int, is_sync: Callable[[int], bool] | None = None) -> int:
    """τ of the gradient of ``step`` for batch-accumulating schedules: 0 for gpipe/1f1b and
    for 2BW's synchronous steps, 1 for other 2BW steps."""
    if not get_spec(name).asynchronous or (is_sync is not None and is_sync(step)):
        return 0
    return 1


def _version(name, P, m, stage, t, i, is_sync) -> int:
    r""":math:`v(k) = \#\{u : u + \tau_u < k\}` for microbatch i of step t on ``stage``."""
    spec = get_spec(name)
    if not spec.asynchronous or spec.in_second_group(P, stage):
        return t
    if spec.per_microbatch_updates:
        return max(0, t * m + i - spec.stage_delay(P, stage))
    return t - 1 if (t >= 1 and step_delay(name, t - 1, is_sync) == 1) else t


def version_of(name: str, num_stages: int, num_microbatches: int, stage: int, step: int,
               mb: int = 0, sync_steps=None) -> int:
    r"""The weight version microbatch ``mb`` of ``step`` reads on ``stage``:
    :math:`v(k) = \#\{u : u + \tau_u < k\}` — gpipe/1f1b t; 2BW t − 1 after a delayed step
    (so steps 0 and 1 share :math:`x_0`), t after a synchronous one; PipeDream
    :math:`\max(0, tm + i - (P-1-s))`."""
    name = _validate(name, num_stages, num_microbatches, 1, 0)
    return _version(name, num_stages, num_microbatches, stage, step, mb,
                    _as_predicate(sync_steps))


# -- analysis ---------------------------------------------------------------------------------


def version_plan(actions: Sequence[Action], start_version: int, next_version: int) -> VersionPlan:
    """See :class:`VersionPlan`. Version v is needed after position i iff some action after i
    reads it, or v ≥ ``next_version`` (a later schedule reads it); reads are monotone, so the
    set alive is the interval [min needed, newest]. ``held`` is counted after each action's
    frees: the version an update reads (for the Taylor correction) lives through that update."""
    n = len(actions)
    suffix_min = [next_version] * (n + 1)
    for i in range(n - 1, -1, -1):
        a = actions[i]
        v = a.version if isinstance(a, (Forward, Backward, OptimizerStep)) else None
        suffix_min[i] = suffix_min[i + 1] if v is None else min(v, suffix_min[i + 1])
    newest = start_version
    alive = set(range(min(suffix_min[0], newest), newest + 1))
    held = len(alive)
    free_after, keep_old, alive_after = [], [], []
    for i, a in enumerate(actions):
        keep = False
        if isinstance(a, OptimizerStep):
            keep = newest >= suffix_min[i + 1]
            newest = a.new_version
            alive.add(newest)
        need = suffix_min[i + 1]
        dead = tuple(sorted(v for v in alive if v < need and v != newest))
        alive.difference_update(dead)
        held = max(held, len(alive))
        free_after.append(dead)
        keep_old.append(keep)
        alive_after.append(len(alive))
    return VersionPlan(tuple(free_after), tuple(keep_old), held, tuple(alive_after))


def check(sched: Schedule) -> None:
    """See :meth:`Schedule.check`."""
    P = sched.num_stages
    sends, recvs = {}, {}
    for s, acts in enumerate(sched.actions):
        newest = sched.start_version
        forwarded: dict[tuple[int, int], int] = {}
        backwarded: set[tuple[int, int]] = set()
        for a in acts:
            if isinstance(a, Send):
                key = (a.kind, a.step, a.mb, s, a.peer)
                if key in sends:
                    raise ValueError(f"stage {s} sends {key} twice")
                sends[key] = True
            elif isinstance(a, Recv):
                key = (a.kind, a.step, a.mb, a.peer, s)
                if key in recvs:
                    raise ValueError(f"stage {s} receives {key} twice")
                recvs[key] = True
            elif isinstance(a, Forward):
                if a.version > newest:
                    raise ValueError(
                        f"{sched.name}: stage {s} forwards step {a.step} microbatch {a.mb} on "
                        f"version {a.version} before it exists (newest {newest})"
                    )
                if (a.step, a.mb) in forwarded:
                    raise ValueError(f"stage {s} forwards {(a.step, a.mb)} twice")
                forwarded[(a.step, a.mb)] = a.version
            elif isinstance(a, Backward):
                if forwarded.get((a.step, a.mb)) != a.version:
                    raise ValueError(
                        f"stage {s}: backward of {(a.step, a.mb)} without a forward on "
                        f"version {a.version}"
                    )
                backwarded.add((a.step, a.mb))
            elif isinstance(a, OptimizerStep):
                mbs = range(sched.num_microbatches) if a.mb is None else (a.mb,)
                if any((a.step, i) not in backwarded for i in mbs):
                    raise ValueError(f"stage {s}: update {a.update} before its backwards")
                if a.new_version != newest + 1:
                    raise ValueError(f"stage {s}: update {a.update} out of order")
                newest = a.new_version
        if set(forwarded) != backwarded:
            raise ValueError(f"stage {s}: some forwards have no backward")
    for key in sends:
        kind, step, mb, src, dst = key
        if not 0 <= dst < P or key not in recvs:
            raise ValueError(f"send {key} has no matching receive")
    for key in recvs:
        if key not in sends:
            raise ValueError(f"receive {key} has no matching send")
