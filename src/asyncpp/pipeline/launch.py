"""Start the ranks of a local process group without torchrun's agent.

Each rank is a subprocess with the variables torchrun would set (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), one intra-op thread, unbuffered output
into its own log file, and a hard deadline after which every rank still alive is killed: a
hung collective ends the launch instead of the caller. Tests, ``verify/`` and the benchmarks
launch their multi-process runs through this one function.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


class RankTimeout(TimeoutError):
    """Some rank was still running at the deadline (all were killed)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for ``MASTER_PORT``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    cmd: Sequence[str],
    nprocs: int,
    logdir: str | Path,
    *,
    deadline: float,
    env: Mapping[str, str] | None = None,
    log_name: str = "log{rank}.txt",
    rank_args: Mapping[int, Sequence[str]] | None = None,
) -> list[int]:
    """Run ``cmd`` as ranks ``0..nprocs-1``; return their exit codes.

    Logs go to ``logdir / log_name.format(rank=r)``. ``rank_args[r]`` is appended to rank r's
    command (ranks launched with different options, as nodes of a multi-node launch can be).
    Raises :class:`RankTimeout` (after killing every rank) if any rank is still running
    ``deadline`` seconds after the start.
    """
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    base = dict(os.environ if env is None else env)
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                WORLD_SIZE=str(nprocs), PYTHONUNBUFFERED="1")
    base.setdefault("OMP_NUM_THREADS", "1")
    procs, logs = [], []
    try:
        for r in range(nprocs):
            log = open(logdir / log_name.format(rank=r), "w")
            logs.append(log)
            procs.append(subprocess.Popen(
                [*cmd, *(rank_args or {}).get(r, ())],
                env=dict(base, RANK=str(r), LOCAL_RANK=str(r)),
                stdout=log, stderr=subprocess.STDOUT))
        end = time.time() + deadline
        try:
            for p in procs:
                p.wait(timeout=max(1.0, end - time.time()))
        except subprocess.TimeoutExpired:
            raise RankTimeout(f"ranks still running after {deadline} s (a hang)") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    return [p.returncode for p in procs]


def log_tail(logdir: str | Path, rank: int, chars: int = 3000,
             log_name: str = "log{rank}.txt") -> str:
    """The last ``chars`` characters of a rank's log (for error messages)."""
    path = Path(logdir) / log_name.format(rank=rank)
    return path.read_text()[-chars:] if path.exists() else "(no log)"
