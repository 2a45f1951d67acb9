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
    executor runs the P partitions on P/2 ranks (``placement=default_devices``: rank d runs
    partitions d and P/2 + d, in the order :func:`asyncpp.pipeline.simulator.rank_programs`
    merges them), or each partition as its own rank.

**Programs.** Each schedule is one class (:mod:`.gpipe`, :mod:`.one_f_one_b`, :mod:`.two_bw`,
:mod:`.pipedream`, :mod:`.wpipe`) in the registry :data:`PROGRAMS`, on the common driver of
:class:`~.base.Program`; its actions (:mod:`asyncpp.pipeline.actions`) carry their stage and
print in the text form ``1F2.3@v1``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..actions import (
    ACTIVATION,
    GRADIENT,
    Action,
    Backward,
    Forward,
    OptimizerStep,
    Recv,
    Send,
    check,
    completes_gradient,
    from_str,
    is_compute,
    is_forward,
    is_update,
    to_str,
)
from ..registry import PIPELINE_SCHEDULES, get_spec
from . import gpipe, one_f_one_b, pipedream, two_bw, wpipe, zb_h1, zb_v  # noqa: F401  (register the classes)
from .base import PROGRAMS, Program

__all__ = ["ACTIVATION", "GRADIENT", "PROGRAMS", "SCHEDULES", "Action", "Backward", "Forward",
           "OptimizerStep", "Program", "Recv", "Schedule", "Send", "VersionPlan", "build",
           "check", "from_str", "program", "stage_actions", "step_delay", "to_str",
           "version_of", "version_plan"]

SCHEDULES = PIPELINE_SCHEDULES
"""The schedules :func:`build` and the executor run (the registry's list; one constant)."""


@dataclass(frozen=True)
class VersionPlan:
    """Weight-version bookkeeping of one stage's action list (derived from the data).

    ``free_after[i]``: versions no action from i+1 on (nor the next schedule) uses;
    ``keep_old[i]``: for an :class:`~asyncpp.pipeline.OptimizerStep` at i, whether the version
    it replaces is still used later (then the executor moves the new weights to fresh storage
    instead of overwriting them); ``held``: the most versions alive at once.
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
        return [frozenset(a.delay for a in acts if is_update(a))
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
        activations): :math:`\max_i (\#F_{\le i} - \#B_{\le i})`, a split backward counting
        at its weight half (the input half frees only part of them)."""
        out = []
        for acts in self.actions:
            live = peak = 0
            for a in acts:
                if is_forward(a):
                    live += 1
                    peak = max(peak, live)
                elif completes_gradient(a):
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


def program(name: str, num_stages: int, num_microbatches: int, sync_steps=None) -> Program:
    """The registered program of schedule ``name`` (no validation of P and m: see
    :func:`build`)."""
    return PROGRAMS[get_spec(name).name](num_stages, num_microbatches, sync_steps)


def build(name: str, num_stages: int, num_microbatches: int, num_steps: int = 1, *,
          start_step: int = 0, sync_steps=None) -> Schedule:
    r"""Build schedule ``name`` ("gpipe", "1f1b", "pipedream", "2bw", "wpipe") for P stages,
    m microbatches per step and steps ``start_step .. start_step + num_steps − 1``.

    ``sync_steps`` (2BW only): step indices, or a predicate on them, where the delay is 0
    (:math:`\tau(t) = 0`: synchronous start / cooldown, ``DelaySchedule.delay_at(t) == 0``).
    Version labels are absolute, so consecutive calls with increasing ``start_step`` chain.
    Each stage's list is its program (:meth:`Program.stage_program`) run to the end (the
    executor runs the same generator lazily, without a fixed end).
    """
    name = _validate(name, num_stages, num_microbatches, num_steps, start_step)
    prog = program(name, num_stages, num_microbatches, sync_steps)
    end = start_step + num_steps
    all_actions = tuple(tuple(prog.stage_program(s, start_step, end))
                        for s in range(num_stages))
    next_versions = tuple(prog.version(s, end, 0) for s in range(num_stages))
    sync = frozenset(t for t in range(start_step, end)
                     if prog.spec.sync_windows and prog.is_sync(t))
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
    prog = program(name, num_stages, num_microbatches, sync_steps)
    return prog.stage_program(stage, start_step, end_step)


def step_delay(name: str, step: int, is_sync: Callable[[int], bool] | None = None) -> int:
    """τ of the gradient of ``step`` for batch-accumulating schedules: 0 for gpipe/1f1b and
    for 2BW's synchronous steps, 1 for other 2BW steps."""
    if not get_spec(name).asynchronous or (is_sync is not None and is_sync(step)):
        return 0
    return 1


def version_of(name: str, num_stages: int, num_microbatches: int, stage: int, step: int,
               mb: int = 0, sync_steps=None) -> int:
    r"""The weight version microbatch ``mb`` of ``step`` reads on ``stage``:
    :math:`v(k) = \#\{u : u + \tau_u < k\}` — gpipe/1f1b t; 2BW t − 1 after a delayed step
    (so steps 0 and 1 share :math:`x_0`), t after a synchronous one; PipeDream
    :math:`\max(0, tm + i - (P-1-s))`."""
    name = _validate(name, num_stages, num_microbatches, 1, 0)
    sync = sync_steps if get_spec(name).sync_windows else None
    return program(name, num_stages, num_microbatches, sync).version(stage, step, mb)


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
        v = a.version if is_compute(a) else None
        suffix_min[i] = suffix_min[i + 1] if v is None else min(v, suffix_min[i + 1])
    newest = start_version
    alive = set(range(min(suffix_min[0], newest), newest + 1))
    held = len(alive)
    free_after, keep_old, alive_after = [], [], []
    for i, a in enumerate(actions):
        keep = False
        if is_update(a):
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
