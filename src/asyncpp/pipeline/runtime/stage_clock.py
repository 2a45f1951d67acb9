r"""Where a rank's time goes while it runs steps, per stage: busy, communication, idle.

Every moment inside :meth:`asyncpp.pipeline.PipelineExecutor.run_steps` is charged to exactly one
category of one stage:

- **busy**: a compute action of the stage — forward (drawing its step's batch included),
  backward (whole, input or weight half), an update's launch and its application (also when
  applied while a receive is out);
- **comm**: the rank's own communication — posting sends and receives, waiting for its sends
  to complete, and the collectives (data-parallel, tied-weight and gradient-norm all-reduces,
  the trainer's metrics exchange);
- **wait**: blocked on a receive whose message has not arrived: the peer is still computing
  it — the pipeline's bubble, or a slower neighbour (the transfer itself is inside this time;
  on one host it is a small part of it);
- **rest**: everything else — the runtime's bookkeeping between actions, and the caller's work
  while a completed step is handed to it (logging, metrics).

Sections nest and the innermost open one takes the time (an update applied while a receive is
out is busy; a collective waited inside an update is comm). Over the wall time :math:`W` of the
measured window of stage s (one stage per rank),

.. math::
    W = \text{busy}_s + \text{comm}_s + \text{idle}_s, \qquad
    \text{idle}_s = \text{wait}_s + \text{rest}_s,

exactly, since every interval between two clock readings is charged once. A receive wait is
idle, not communication: it measures time the stage had nothing to compute, which is what a
schedule's bubble is.

**Window.** Only time inside ``run_steps`` calls counts: evaluation and checkpoints between
calls are not steps; the fill and drain of each call are (a drain is idle time a segment
costs). **Steady state**: the first ``warmup_steps`` steps this clock sees (default 1: graph
compilation, allocator growth, the activation headers of the first messages, the pipeline
fill) are excluded; a run of no more steps than that is reported whole, with
``warmup_steps`` 0.

**Several stages per rank** share the rank's wall time: ``busy_s``, ``comm_s`` and ``wait_s`` are
the stage's own, ``other_s`` the rank's time on its other stages' compute and communication,
and ``idle_s = W − busy_s − comm_s − other_s``. Time outside any stage's action (the trainer's
metrics exchange) is the rank's and counts as idle of each of its stages; with one stage per
rank it is that stage's.

**Cost.** Two ``time.perf_counter`` readings per section, no synchronisation. **CUDA**: kernels
are queued asynchronously and NCCL's ``wait`` only orders streams, so the figures say where
the rank's host thread spends its time (launching work, blocked in a wait), not the device's:
device work still queued shows up in whichever later host call synchronises. Measuring the
device would need CUDA events per action; nothing here adds a synchronisation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

BUSY, COMM, WAIT, REST = "busy", "comm", "wait", "rest"


@dataclass(frozen=True)
class StageTimes:
    """The measured window of one stage on one rank (see the module docstring)."""

    stage: int | None
    steps: int
    warmup_steps: int
    wall_s: float
    busy_s: float
    comm_s: float
    wait_s: float
    other_s: float = 0.0

    @property
    def idle_s(self) -> float:
        """:math:`W - \\text{busy} - \\text{comm} - \\text{other}` (``wait_s`` included)."""
        return self.wall_s - self.busy_s - self.comm_s - self.other_s

    def to_dict(self) -> dict:
        """The fields of ``summary.json``'s ``stage_times`` entries: seconds and shares of
        ``wall_s``."""
        w = self.wall_s

        def share(x: float) -> float | None:
            return x / w if w > 0 else None

        return {"stage": self.stage, "steps": self.steps, "warmup_steps": self.warmup_steps,
                "wall_s": w, "busy_s": self.busy_s, "comm_s": self.comm_s,
                "idle_s": self.idle_s, "wait_s": self.wait_s, "other_s": self.other_s,
                "busy_share": share(self.busy_s), "comm_share": share(self.comm_s),
                "idle_share": share(self.idle_s), "wait_share": share(self.wait_s)}


class StageClock:
    """Charges a rank's time to (category, stage) as sections open and close; ``now``
    reads the time (seconds)."""

    def __init__(self, stages: Iterable[int | None], warmup_steps: int = 1,
                 now: Callable[[], float] = time.perf_counter) -> None:
        if not (isinstance(warmup_steps, int) and warmup_steps >= 0):
            raise ValueError(f"warmup_steps must be a non-negative integer, got {warmup_steps!r}")
        self.stages = list(stages)
        self.warmup_steps = warmup_steps
        self.now = now
        self.steps = 0
        self._acc: dict[tuple[str, int | None], float] = {}
        self._warm: dict[tuple[str, int | None], float] | None = None
        self._stack: list[tuple[str, int | None]] = []
        self._t: float | None = None  # the last reading; None while stopped

    def start(self) -> None:
        """Begin charging (a ``run_steps`` call starts)."""
        self._stack.clear()
        self._t = self.now()

    def stop(self) -> None:
        """Stop charging (the call ended, normally or not); open sections are dropped."""
        if self._t is not None:
            self._charge()
        self._t = None
        self._stack.clear()

    def _charge(self) -> None:
        now = self.now()
        key = self._stack[-1] if self._stack else (REST, None)
        self._acc[key] = self._acc.get(key, 0.0) + (now - self._t)
        self._t = now

    def push(self, kind: str | None, stage: int | None = None) -> None:
        """Open a section: time goes to ``kind`` of ``stage`` until the matching :meth:`pop`
        or a nested section; ``None`` keeps the enclosing section's kind (or stage)."""
        if self._t is None:
            return
        self._charge()
        top = self._stack[-1] if self._stack else (REST, None)
        self._stack.append((kind or top[0], top[1] if stage is None else stage))

    def pop(self) -> None:
        """Close the innermost open section."""
        if self._t is None or not self._stack:
            return
        self._charge()
        self._stack.pop()

    def step_done(self) -> None:
        """A step completed on this rank; the end of the warm-up is the window's start."""
        self.steps += 1
        if self.steps == self.warmup_steps and self._t is not None:
            self._charge()
            self._warm = dict(self._acc)

    def report(self) -> list[StageTimes]:
        """One :class:`StageTimes` per stage of the rank, over the steady window."""
        if self._t is not None:
            self._charge()
        excluded = self._warm is not None and self.steps > self.warmup_steps
        warm = self._warm if excluded else {}
        win = {k: v - warm.get(k, 0.0) for k, v in self._acc.items()}
        wall = sum(win.values())
        skipped = self.warmup_steps if excluded else 0
        measured = self.steps - skipped
        one = len(self.stages) == 1

        def own(kind: str, s) -> float:
            rank = win.get((kind, None), 0.0) if one and s is not None else 0.0
            return win.get((kind, s), 0.0) + rank

        out = []
        for s in self.stages:
            other = sum((win.get((k, t), 0.0) for k in (BUSY, COMM)
                         for t in self.stages if t != s), 0.0)
            out.append(StageTimes(s, measured, skipped, wall,
                                  own(BUSY, s), own(COMM, s), own(WAIT, s), other))
        return out
