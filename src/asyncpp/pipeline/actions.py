r"""A pipeline program's instructions: what a stage does, with a short text form and a parser.

A schedule is a *program* per stage (and, once several stages share a rank, per rank): a
sequence of the actions below. Every action names the stage that runs it (``stage``;
``None`` in hand-built lists means "the stage whose list holds it"), so a rank's merged
program, an error message or a grid cell says on its own what it is.

**Text form** (``to_str`` / ``from_str``, :math:`\text{from\_str}\circ\text{to\_str} =
\text{id}` on every action; tested on every action of every schedule)::

    action   := [stage] body
    pass     := ("F" | "B" | "I" | "W") step "." mb "@v" version  1F2.3@v1
    update   := "U" step ["." mb] "@v" version "#" update "d" delay ["=v" new_version]
                                                                  0U2@v1#2d1   0U1.0@v0#2d2
    send     := "S" kind step "." mb ">" peer                      0Sa2.3>1
    recv     := "R" kind step "." mb "<" peer                      1Ra2.3<0
    kind     := "a" (activation) | "g" (gradient)

F is a forward, B a backward, I and W its input and weight halves (zero-bubble schedules).
``1F2.3@v1`` reads: stage 1, forward of microbatch 3 of step 2 on weight version 1.
``0U2@v1#2d1``: stage 0 applies gradient number 2 (the sum over step 2's microbatches,
computed on version 1) with delay 1; it produces version ``update + 1`` = 3 (written
``=v<n>`` only when it differs). ``0Sa2.3>1``: stage 0 sends the activation of (2, 3) to stage
1; ``1Ra2.3<0`` is its receive. The stage prefix is left out when ``stage`` is ``None``.

:func:`check` validates a schedule's programs and names the offending action in this form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

ACTIVATION = "activation"
GRADIENT = "gradient"
_KIND_CODE = {ACTIVATION: "a", GRADIENT: "g"}
_CODE_KIND = {v: k for k, v in _KIND_CODE.items()}


@dataclass(frozen=True)
class ComputePass:
    """The fields of a compute pass over one microbatch: step, microbatch, weight version and
    (once placed) stage; its text form is the action table's."""

    step: int
    mb: int
    version: int
    stage: int | None = field(default=None, kw_only=True)

    def __str__(self) -> str:
        return to_str(self)


@dataclass(frozen=True)
class Forward(ComputePass):
    """Forward of microbatch ``mb`` of step ``step`` on weight version ``version``."""


@dataclass(frozen=True)
class Backward(ComputePass):
    """Backward of microbatch ``mb`` of step ``step`` (same version as its forward)."""


@dataclass(frozen=True)
class BackwardInput(ComputePass):
    r"""The input half of a backward, :math:`\bar x = (\partial f/\partial x)^\top \bar y`
    (zero-bubble schedules); its gradient is what the stage sends upstream."""


@dataclass(frozen=True)
class BackwardWeight(ComputePass):
    r"""The weight half of a backward,
    :math:`\bar w \leftarrow \bar w + (\partial f/\partial w)^\top \bar y`, after its
    :class:`BackwardInput`; it sends nothing, so a schedule may move it into idle time."""


@dataclass(frozen=True)
class Send:
    """Send the ``kind`` ("activation" or "gradient") of (step, mb) to stage ``peer``."""

    kind: str
    step: int
    mb: int
    peer: int
    stage: int | None = field(default=None, kw_only=True)

    def __str__(self) -> str:
        return to_str(self)


@dataclass(frozen=True)
class Recv:
    """Receive the ``kind`` ("activation" or "gradient") of (step, mb) from stage ``peer``."""

    kind: str
    step: int
    mb: int
    peer: int
    stage: int | None = field(default=None, kw_only=True)

    def __str__(self) -> str:
        return to_str(self)


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
    stage: int | None = field(default=None, kw_only=True)

    @property
    def applied_at(self) -> int:
        """The simulated step a(u) = u + τ at which this gradient is applied."""
        return self.update + self.delay

    def __str__(self) -> str:
        return to_str(self)


Action = Forward | Backward | BackwardInput | BackwardWeight | Send | Recv | OptimizerStep
PASSES: dict[type, str] = {Forward: "F", Backward: "B", BackwardInput: "I", BackwardWeight: "W"}
"""The model passes over one microbatch and their letter in the text form, the simulator's
costs and the timeline's labels."""
_PASS_OF = {v: k for k, v in PASSES.items()}
UPDATE = "U"
COMPUTE = (*PASSES, OptimizerStep)
GRADIENT_DONE = (Backward, BackwardWeight)
"""The passes after which a microbatch's weight gradient is complete."""
INPUT_GRADIENT = (Backward, BackwardInput)
"""The passes that produce the gradient a stage sends upstream."""


SEND, RECV = "S", "R"
KINDS: dict[type, str] = {**PASSES, OptimizerStep: UPDATE, Send: SEND, Recv: RECV}
"""Every action class and its letter: the one table that code outside this module reads to
tell actions apart (through :func:`kind_of` and the predicates below), so a new kind of action
is added here and nowhere else is a type tested."""
COMPUTE_KINDS = frozenset(KINDS[c] for c in COMPUTE)
"""F, B, I, W, U: the actions that run on the stage's device (everything but messages)."""


def kind_of(action: Action) -> str:
    """The letter of an action: F, B, I, W (passes), U (update), S or R (messages)."""
    kind = KINDS.get(type(action))
    if kind is None:
        raise ValueError(f"not a pipeline action: {action!r}")
    return kind


def is_send(action: Action) -> bool:
    """A :class:`Send`."""
    return kind_of(action) == SEND


def is_recv(action: Action) -> bool:
    """A :class:`Recv`."""
    return kind_of(action) == RECV


def is_message(action: Action) -> bool:
    """A :class:`Send` or a :class:`Recv` (handled by the transport, not the stage)."""
    return kind_of(action) in (SEND, RECV)


def is_compute(action: Action) -> bool:
    """A pass or an update: an action in :data:`COMPUTE`."""
    return kind_of(action) in COMPUTE_KINDS


def is_forward(action: Action) -> bool:
    """A :class:`Forward`."""
    return kind_of(action) == PASSES[Forward]


def is_update(action: Action) -> bool:
    """An :class:`OptimizerStep`."""
    return kind_of(action) == UPDATE


def completes_gradient(action: Action) -> bool:
    """One of :data:`GRADIENT_DONE`: the microbatch's weight gradient is complete after it."""
    return type(action) in GRADIENT_DONE


def makes_input_gradient(action: Action) -> bool:
    """One of :data:`INPUT_GRADIENT`: it produces the gradient the stage sends upstream."""
    return type(action) in INPUT_GRADIENT


def on_stage(action: Action, stage: int) -> Action:
    """``action`` with its stage set to ``stage``."""
    return action if action.stage == stage else replace(action, stage=stage)


def stage_of(action: Action, default: int | None = None) -> int | None:
    """The stage that runs ``action`` (``default`` when the action does not say)."""
    return default if action.stage is None else action.stage


def to_str(action: Action, stage: int | None = None) -> str:
    """The text form of ``action`` (module docstring); ``stage`` fills in a missing stage."""
    s = stage_of(action, stage)
    pre = "" if s is None else str(s)
    a = action
    if type(a) in PASSES:
        return f"{pre}{PASSES[type(a)]}{a.step}.{a.mb}@v{a.version}"
    if isinstance(a, OptimizerStep):
        mb = "" if a.mb is None else f".{a.mb}"
        new = "" if a.new_version == a.update + 1 else f"=v{a.new_version}"
        return f"{pre}U{a.step}{mb}@v{a.version}#{a.update}d{a.delay}{new}"
    if isinstance(a, (Send, Recv)):
        if a.kind not in _KIND_CODE:
            raise ValueError(f"message kind must be {ACTIVATION!r} or {GRADIENT!r}, got "
                             f"{a.kind!r}")
        op, arrow = ("S", ">") if isinstance(a, Send) else ("R", "<")
        return f"{pre}{op}{_KIND_CODE[a.kind]}{a.step}.{a.mb}{arrow}{a.peer}"
    raise ValueError(f"not a pipeline action: {a!r}")


_RE = re.compile(
    r"(?P<stage>\d+)?(?:"
    r"(?P<fb>[FBIW])(?P<fs>\d+)\.(?P<fm>\d+)@v(?P<fv>\d+)"
    r"|U(?P<us>\d+)(?:\.(?P<um>\d+))?@v(?P<uv>\d+)#(?P<uu>\d+)d(?P<ud>\d+)(?:=v(?P<un>\d+))?"
    r"|(?P<op>[SR])(?P<ck>[ag])(?P<cs>\d+)\.(?P<cm>\d+)(?P<arrow>[<>])(?P<cp>\d+)"
    r")"
)


def from_str(text: str) -> Action:
    """Parse the text form of one action (module docstring); ``ValueError`` naming the text
    and the grammar if it is not one."""
    m = _RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None or (m["op"] and (m["arrow"] == ">") != (m["op"] == "S")):
        raise ValueError(
            f"not a pipeline action: {text!r}; expected e.g. '1F2.3@v1' (stage 1, forward of "
            "step 2 microbatch 3 on version 1), '0B2.3@v1', '0U2@v1#2d1' (update 2 on version "
            "1, delay 1), '0Sa2.3>1' (send the activation to stage 1), '1Rg2.3<2'")
    g = m.groupdict()
    stage = None if g["stage"] is None else int(g["stage"])
    if g["fb"]:
        return _PASS_OF[g["fb"]](int(g["fs"]), int(g["fm"]), int(g["fv"]), stage=stage)
    if g["uu"] is not None:
        update = int(g["uu"])
        return OptimizerStep(int(g["us"]), None if g["um"] is None else int(g["um"]), update,
                             int(g["uv"]), int(g["ud"]),
                             update + 1 if g["un"] is None else int(g["un"]), stage=stage)
    cls = Send if g["op"] == "S" else Recv
    return cls(_CODE_KIND[g["ck"]], int(g["cs"]), int(g["cm"]), int(g["cp"]), stage=stage)


def version_read(action: Action) -> int | None:
    """The weight version a compute action reads (``None`` for messages)."""
    return action.version if isinstance(action, COMPUTE) else None


def check(sched) -> None:
    """Raise ``ValueError`` unless the programs of ``sched`` (a
    :class:`~asyncpp.pipeline.schedules.Schedule`) are consistent: every send has one matching
    receive (and vice versa), every microbatch is forwarded then backwarded once on the same
    version, each update follows the backwards it consumes and produces the next version, and
    every version a forward reads exists by then (``v ≤`` newest). The message names the
    offending action in its text form."""
    P = sched.num_stages
    sends: dict[tuple, Action] = {}
    recvs: dict[tuple, Action] = {}
    for s, acts in enumerate(sched.actions):
        newest = sched.start_version
        forwarded: dict[tuple[int, int], int] = {}
        backwarded: set[tuple[int, int]] = set()
        input_done: set[tuple[int, int]] = set()
        for a in acts:
            txt = to_str(a, s)
            if a.stage is not None and a.stage != s:
                raise ValueError(f"{sched.name}: action {txt} is in stage {s}'s program")
            if isinstance(a, Send):
                key = (a.kind, a.step, a.mb, s, a.peer)
                if key in sends:
                    raise ValueError(f"{sched.name}: stage {s} sends twice: {txt}")
                sends[key] = on_stage(a, s)
            elif isinstance(a, Recv):
                key = (a.kind, a.step, a.mb, a.peer, s)
                if key in recvs:
                    raise ValueError(f"{sched.name}: stage {s} receives twice: {txt}")
                recvs[key] = on_stage(a, s)
            elif isinstance(a, Forward):
                if a.version > newest:
                    raise ValueError(
                        f"{sched.name}: {txt}: stage {s} forwards step {a.step} microbatch "
                        f"{a.mb} on version {a.version} before it exists (newest {newest})"
                    )
                if (a.step, a.mb) in forwarded:
                    raise ValueError(f"{sched.name}: stage {s} forwards {(a.step, a.mb)} "
                                     f"twice: {txt}")
                forwarded[(a.step, a.mb)] = a.version
            elif isinstance(a, (Backward, BackwardInput)):
                key = (a.step, a.mb)
                if forwarded.get(key) != a.version:
                    raise ValueError(
                        f"{sched.name}: {txt}: stage {s}: backward of {key} without "
                        f"a forward on version {a.version}"
                    )
                if key in input_done or key in backwarded:
                    raise ValueError(f"{sched.name}: stage {s} backwards {key} twice: {txt}")
                (backwarded if isinstance(a, Backward) else input_done).add(key)
            elif isinstance(a, BackwardWeight):
                key = (a.step, a.mb)
                if key not in input_done or forwarded.get(key) != a.version:
                    raise ValueError(f"{sched.name}: {txt}: stage {s}: weight half of {key} "
                                     f"without its input half on version {a.version}")
                input_done.discard(key)
                backwarded.add(key)
            elif isinstance(a, OptimizerStep):
                mbs = range(sched.num_microbatches) if a.mb is None else (a.mb,)
                if any((a.step, i) not in backwarded for i in mbs):
                    raise ValueError(f"{sched.name}: {txt}: stage {s}: update {a.update} "
                                     "before its backwards")
                if a.new_version != newest + 1:
                    raise ValueError(f"{sched.name}: {txt}: stage {s}: update {a.update} out "
                                     f"of order (newest version {newest})")
                newest = a.new_version
            else:
                raise ValueError(f"{sched.name}: stage {s}: not a pipeline action: {a!r}")
        missing = sorted(set(forwarded) - backwarded)
        if missing:
            t, i = missing[0]
            raise ValueError(f"{sched.name}: stage {s}: some forwards have no backward "
                             f"(first: {to_str(Forward(t, i, forwarded[(t, i)]), s)})")
    for key, a in sends.items():
        if not 0 <= key[4] < P or key not in recvs:
            raise ValueError(f"{sched.name}: send {to_str(a)} has no matching receive")
    for key, a in recvs.items():
        if key not in sends:
            raise ValueError(f"{sched.name}: receive {to_str(a)} has no matching send")
