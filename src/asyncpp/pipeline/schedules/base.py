r"""The schedule program: what every schedule shares, and the registry of schedule classes.

A :class:`Program` yields one stage's actions for steps ``start .. end − 1`` (``end`` may be a
callable moved earlier while the program runs, see :func:`~asyncpp.pipeline.schedules.
stage_actions`). The driver is common to all schedules; a schedule class says only what
differs (each hook is a fact of the paper that defines the schedule):

- :meth:`Program.version` — the weight version :math:`v(k) = \#\{u : u + \tau_u < k\}` a
  microbatch reads;
- :meth:`Program.update_after` — the update (if any) issued after a backward;
- :meth:`Program.segment_end` — where the stage drains (a flush);
- :meth:`Program.order` — the order of forwards and backwards within a segment (a backward
  whole, "B", or split into its input and weight halves, "I" then "W": zero-bubble).

A new schedule is one module with one class registered with :func:`register`, plus its
:class:`~asyncpp.pipeline.registry.ScheduleSpec` (the torch-free facts the configuration reads).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import ClassVar

from ..actions import (
    ACTIVATION,
    GRADIENT,
    PASSES,
    Action,
    OptimizerStep,
    Recv,
    Send,
    completes_gradient,
    is_forward,
    makes_input_gradient,
)
from ..registry import get_spec

PROGRAMS: dict[str, type[Program]] = {}


def register(cls: type[Program]) -> type[Program]:
    """Class decorator: make ``cls`` the program of schedule ``cls.name``."""
    get_spec(cls.name)  # a program needs its facts
    PROGRAMS[cls.name] = cls
    return cls


def as_predicate(sync_steps) -> Callable[[int], bool]:
    """``sync_steps`` (None, a collection of step indices, or a predicate) as a predicate."""
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


class Program:
    """One schedule on ``num_stages`` (P) stages with ``num_microbatches`` (m) per step."""

    name: ClassVar[str]

    def __init__(self, num_stages: int, num_microbatches: int, sync_steps=None) -> None:
        self.spec = get_spec(self.name)
        self.num_stages = num_stages
        self.num_microbatches = num_microbatches
        if sync_steps is not None and not self.spec.sync_windows:
            raise ValueError(
                f"sync_steps (synchronous start/cooldown) applies to the 2bw schedule only, not "
                f"{self.name!r}: gpipe/1f1b are synchronous already and pipedream has no sync "
                "windows"
            )
        self.has_sync = sync_steps is not None
        self.is_sync = as_predicate(sync_steps)

    # -- hooks ---------------------------------------------------------------------------------
    def version(self, stage: int, step: int, mb: int) -> int:
        """The version microbatch ``mb`` of ``step`` reads on ``stage`` (synchronous: t)."""
        return step

    def update_after(self, stage: int, step: int, mb: int, version: int) -> OptimizerStep | None:
        """The update issued right after the backward of (step, mb): by default one per step,
        after its last microbatch, summing the step's gradient, with the step's delay."""
        if mb != self.num_microbatches - 1:
            return None
        return OptimizerStep(step, None, step, version, self.step_delay(stage, step), step + 1,
                             stage=stage)

    def step_delay(self, stage: int, step: int) -> int:
        """τ of the gradient of ``step`` on ``stage`` (synchronous: 0)."""
        return 0

    def segment_end(self, stage: int, t0: int, end: int) -> int:
        """Exclusive end of the segment (run of steps without a flush) starting at ``t0`` for
        the end known now: one step for flushing schedules, the whole run otherwise."""
        return t0 + 1 if self.spec.flush_every_step else end

    def order(self, stage: int, count: Callable[[], int]) -> Iterator[tuple[str, int]]:
        """1F1B within a segment of ``count()`` items (re-read, since the end may move
        earlier): P − 1 − s warm-up forwards, then forward and backward alternately, then the
        remaining backwards. Yields (pass letter, item index) — "F", "B", or "I" and "W" for
        a backward split into its halves (:data:`~asyncpp.pipeline.actions.PASSES`); returns
        the number forwarded."""
        nf = nb = 0
        warm = self.num_stages - 1 - stage
        while nf < min(warm, count()):
            yield "F", nf
            nf += 1
        while nf < count():
            yield "F", nf
            nf += 1
            yield "B", nb
            nb += 1
        while nb < nf:
            yield "B", nb
            nb += 1
        return nf

    # -- the driver ----------------------------------------------------------------------------
    def stage_program(self, stage: int, start_step: int, end_step) -> Iterator[Action]:
        """The actions of ``stage`` for steps ``start_step ..`` up to ``end_step`` (an int or
        a callable, see :func:`~asyncpp.pipeline.schedules.stage_actions`)."""
        P, m, s = self.num_stages, self.num_microbatches, stage
        end = end_step if callable(end_step) else (lambda: end_step)

        def forward(a: Action) -> Iterator[Action]:
            t, i = a.step, a.mb
            if s > 0:
                yield Recv(ACTIVATION, t, i, s - 1, stage=s)
            yield a
            if s < P - 1:
                yield Send(ACTIVATION, t, i, s + 1, stage=s)

        def backward(a: Action) -> Iterator[Action]:
            t, i = a.step, a.mb
            if makes_input_gradient(a):  # B and I consume the gradient and send upstream
                if s < P - 1:
                    yield Recv(GRADIENT, t, i, s + 1, stage=s)
                yield a
                if s > 0:
                    yield Send(GRADIENT, t, i, s - 1, stage=s)
            else:
                yield a
            if completes_gradient(a):  # the weight gradient of (t, i) is complete
                up = self.update_after(s, t, i, a.version)
                if up is not None:
                    yield up

        passes = {letter: cls for cls, letter in PASSES.items()}

        t0 = start_step
        while t0 < end():
            limit = self.segment_end(s, t0, end())

            def count(t0=t0, limit=limit) -> int:
                return (min(end(), limit) - t0) * m

            order = self.order(s, count)
            while True:
                try:
                    kind, n = next(order)
                except StopIteration as done:
                    nf = done.value
                    break
                t, i = t0 + n // m, n % m
                a = passes[kind](t, i, self.version(s, t, i), stage=s)
                yield from (forward(a) if is_forward(a) else backward(a))
            t0 += nf // m
