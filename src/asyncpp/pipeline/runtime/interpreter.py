"""Running a rank's program: each compute action goes through :data:`HANDLERS` to the
executor's handlers on its stage, and runs of sends and receives to the transport — in the
program's order (one stage per rank), or with the stages of a merged program interleaved by
readiness (several stages per rank)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..actions import (
    KINDS,
    Backward,
    BackwardInput,
    BackwardWeight,
    Forward,
    OptimizerStep,
    is_message,
    is_recv,
    is_send,
    kind_of,
    to_str,
)
from .errors import PipelineError
from .stage_clock import BUSY

HANDLERS: dict[str, tuple[str, ...]] = {
    KINDS[Forward]: ("_before_forward", "_forward"),
    KINDS[Backward]: ("_backward",),
    KINDS[BackwardInput]: ("_backward_input",),
    KINDS[BackwardWeight]: ("_backward_weight",),
    KINDS[OptimizerStep]: ("_launch_update",),
}
"""Action kind (its letter in :data:`~asyncpp.pipeline.actions.KINDS`) → the executor's
handler methods, called in order with (action, stage context, run state); looked up on the
instance at each dispatch, so an instrumented or patched handler takes effect. Runs of
Send/Recv actions go to the transport."""


def dispatch(ex, a, run):
    """Run compute action ``a`` on its stage through its handlers; the last one's result (a
    step's output, or ``None``)."""
    for handler in HANDLERS[kind_of(a)]:
        out = getattr(ex, handler)(a, ex.contexts[a.stage], run)
    return out


def in_order(ex, program: Iterable, run) -> Iterator:
    """Run one stage's program in its order, each run of consecutive sends and receives
    posted together (idle time while a receive is out applies ready updates)."""
    contexts, tr, idle, clock = ex.contexts, ex.transport, ex._apply_ready, ex.clock
    comm: list = []
    for a in program:
        if is_message(a):
            comm.append(a)
            continue
        if comm:
            tr.communicate(comm, contexts, idle)
            comm = []
        clock.push(BUSY, a.stage)
        out = dispatch(ex, a, run)
        clock.pop()
        if out is not None:
            clock.step_done()
            yield out
    if comm:
        tr.communicate(comm, contexts, idle)


def interleaved(ex, program: Iterable, run) -> Iterator:
    r"""Run a rank's merged program of several stages, each stage in its own order, the
    stages interleaved by readiness: of the stages' next compute actions, the first (in
    the merged program's order) whose receives have arrived runs next; when none has,
    the rank waits for the first one's. The merged order was computed for nominal costs;
    with real ones (a slower backward, a late message) a fixed interleaving makes one
    stage wait while another's input is already there.

    Free of deadlock whenever the merged programs are: a rank waits only on its first
    unfinished action u in program order, whose message comes from an unfinished action
    p of the peer at or after the peer's own first unfinished action v; if v waited in
    turn on an unfinished action at or after u, the merged programs would order
    u ≤ (that action) < v ≤ p < u. Each stage's own order — and so every version,
    update and message of a stream — is the program's."""
    tr, contexts, clock = ex.transport, ex.contexts, ex.clock
    # a unit: [position in the merged program, its receives, the compute, its sends]
    queues: dict[int, list] = {s: [] for s in contexts}
    recvs: list = []
    for n, a in enumerate(program):
        if is_recv(a):
            recvs.append(a)
        elif is_send(a):
            queues[a.stage][-1][3].append(a)  # after the compute that produced it
        else:  # a compute action, after its own stage's receives
            queues[a.stage].append([n, [r for r in recvs if r.stage == a.stage], a, []])
            recvs = [r for r in recvs if r.stage != a.stage]
    if recvs:
        raise PipelineError(f"receives {[to_str(r) for r in recvs]} precede no compute "
                            "action of their stage")
    for q in queues.values():
        q.reverse()  # each stage's next unit is popped from the end
    posted: dict[int, tuple] = {}

    def ready(unit) -> bool:
        for r in unit[1]:
            if r.peer in tr.local:
                if not tr.local_ready(r, contexts):
                    return False
                continue
            if id(r) not in posted:
                clock.push(None, r.stage)
                got = tr.post_recv(r, contexts, block=False)
                clock.pop()
                if got is None:
                    return False
                posted[id(r)] = got
            if not posted[id(r)][1].is_completed():
                return False
        return True

    while any(queues.values()):
        heads = [q[-1] for q in queues.values() if q]
        # ready() posts the heads' receives early: they are matched stream by stream
        cand = [u for u in heads if ready(u)]
        if not cand:
            ex._apply_ready()  # idle: updates whose reductions are done
        u = min(cand or heads, key=lambda x: x[0])
        a = u[2]
        clock.push(None, a.stage)
        for r in u[1]:
            if r.peer in tr.local:
                continue
            got = posted.pop(id(r), None) or tr.post_recv(r, contexts, block=True)
            tr.finish_recv(r, got, contexts)
        clock.pop()
        clock.push(BUSY, a.stage)
        out = dispatch(ex, a, run)
        clock.pop()
        if out is not None:
            clock.step_done()
            yield out
        if u[3]:
            clock.push(None, a.stage)
            tr.communicate(u[3], contexts)
            clock.pop()
        queues[a.stage].pop()
