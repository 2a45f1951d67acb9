r"""Stop requests by signal: the first SIGTERM or SIGINT asks the run to stop at the next step
boundary with a checkpoint (``stop["signal"]``), on every rank.

Which later signals end the process at once:

- SIGTERM never does. A cluster delivers it several times: Slurm or systemd signals the whole
  cgroup (``torchrun`` and its workers together) and ``torchrun`` forwards its own copy to each
  worker, so a worker sees two SIGTERMs for one request. Ending at the second would lose the
  interrupt checkpoint; the launcher's own escalation (SIGKILL after its grace period) still
  bounds the wait.
- SIGINT does when it is *repeated*: Ctrl-C twice ends at once. Under ``torchrun`` a Ctrl-C
  reaches a worker twice within milliseconds (from the terminal and forwarded by the agent);
  a copy that arrives within :data:`COPY_WINDOW_S` of the first is that same request.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

COPY_WINDOW_S = 2.0


def launched_by_torchrun() -> bool:
    """Whether this process is a worker of a ``torchrun`` launch (its agent forwards signals)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or "TORCHELASTIC_RESTART_COUNT" in os.environ


@contextlib.contextmanager
def stop_on_signals(stop: dict, *, forwarded: bool | None = None):
    """While active, SIGTERM/SIGINT set ``stop["signal"]`` (the first one's number) as the
    module docstring describes; ``forwarded``: signals may arrive twice per request (default:
    :func:`launched_by_torchrun`). The previous handlers are restored on exit, except that
    after a stop was requested SIGTERM stays ignored (the process is stopping; a late copy must
    not kill it before it exits with 143). Outside the main thread (where Python cannot install
    handlers) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if forwarded is None:
        forwarded = launched_by_torchrun()
    first = {"at": None}

    def handler(signum, frame):
        now = time.monotonic()
        if stop.get("signal") is None:
            stop["signal"] = signum
            first["at"] = now
            return
        if signum != signal.SIGINT:
            return  # another copy of a SIGTERM: the checkpoint is on its way
        if forwarded and stop["signal"] == signal.SIGINT and now - first["at"] < COPY_WINDOW_S:
            return  # the agent's copy of the same Ctrl-C
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # a repeated Ctrl-C: end now

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if stop.get("signal") is not None:
            # the stop is done (checkpoint written); a late copy of the SIGTERM must not turn
            # the exit status 143 the caller is about to return into a death by signal
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
