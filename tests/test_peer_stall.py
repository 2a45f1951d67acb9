"""A peer that stalls but does not die (SIGSTOP): every rank exits with one clear line naming
the rank it waited for, within ``run.peer_timeout_s`` — not after a default 10-minute hang.
Two real CLI ranks (started the way torchrun starts workers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asyncpp.pipeline.launch import free_port

pytestmark = pytest.mark.multiprocess
TIMEOUT = 6.0



@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("asyncpp-cache")


def test_a_stopped_peer_ends_every_rank_with_a_message(tmp_path, cache):
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE="2",
               PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [sys.executable, "-m", "asyncpp.train.cli", "--model.name", "tiny",
            "--data.max_documents", "60", "--data.seq_len", "16", "--data.cache_dir", str(cache),
            "--train.steps", "100000", "--train.batch_size", "4", "--train.log_every", "1",
            "--train.eval_every", "0", "--pipeline.schedule", "2bw", "--pipeline.stages", "2",
            "--pipeline.microbatches", "2", "--run.threads", "1", "--log.progress", "false",
            "--log.tensorboard", "off", "--run.peer_timeout_s", str(TIMEOUT),
            "--run.dir", str(tmp_path / "run")]
    logs = [open(tmp_path / f"rank{r}.log", "w") for r in range(2)]
    procs = [subprocess.Popen(args, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=logs[r], stderr=subprocess.STDOUT) for r in range(2)]
    try:
        metrics = tmp_path / "run" / "metrics.jsonl"
        deadline = time.time() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
            assert time.time() < deadline, (tmp_path / "rank0.log").read_text()[-2000:]
            assert all(p.poll() is None for p in procs)
            time.sleep(0.2)
        os.kill(procs[1].pid, signal.SIGSTOP)
        t_stop = time.time()
        rc0 = procs[0].wait(timeout=TIMEOUT + 60)
        waited = time.time() - t_stop
        os.kill(procs[1].pid, signal.SIGCONT)
        rc1 = procs[1].wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
        for f in logs:
            f.close()
    out0, out1 = ((tmp_path / f"rank{r}.log").read_text() for r in range(2))
    assert rc0 == 1 and rc1 == 1, (rc0, rc1, out0[-2000:], out1[-2000:])
    # The live rank gave up after the timeout (not at once, not after minutes), naming rank 1.
    assert TIMEOUT - 0.5 <= waited <= TIMEOUT + 45, waited
    err0 = [ln for ln in out0.splitlines() if "error" in ln.lower()]
    assert err0 and "from rank 1" in err0[-1] and f"{TIMEOUT:g} s timeout" in err0[-1], out0
    assert err0[-1].startswith("asyncpp-train: error: rank 0 (stage 0")
    # The stopped rank, resumed, finds its peer gone and says so in one line too.
    err1 = [ln for ln in out1.splitlines() if ln.startswith("asyncpp-train: error: rank 1")]
    assert err1, out1[-2000:]
    assert "Traceback" not in out0 and "Traceback" not in out1


def _set_up_args(root: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "asyncpp.train.cli", "--model.name", "tiny",
            "--data.max_documents", "60", "--data.seq_len", "16", "--data.cache_dir", str(cache),
            "--train.steps", "4", "--train.batch_size", "4", "--train.eval_every", "0",
            "--pipeline.schedule", "2bw", "--pipeline.stages", "2", "--pipeline.microbatches", "2",
            "--run.threads", "1", "--log.progress", "false", "--log.tensorboard", "off",
            "--run.peer_timeout_s", str(TIMEOUT), "--run.dir", str(root / "run")]


@pytest.mark.parametrize("how", ["stopped-before-joining", "killed-during-set-up",
                                 "stopped-during-set-up"])
def test_a_peer_lost_during_set_up_is_named_in_one_line(tmp_path, how):
    """Rank 1 SIGSTOPped before it joins the process group (rank 0 waits in the rendezvous),
    or SIGKILLed / SIGSTOPped while rank 0 prepares the data (the cache folder appears; rank 1
    then waits in, or has just left, a start-up collective): rank 0 exits 1 with one line
    naming the set-up phase and rank 1 — at once for a dead peer, after the timeout for a
    silent one — and no traceback (formerly gloo's raw "Connection closed by peer")."""
    cache = tmp_path / "fresh-cache"  # rank 0 creates it while rank 1 waits for it
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE="2",
               PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    logs = [open(tmp_path / f"rank{r}.log", "w") for r in range(2)]
    procs = [subprocess.Popen(_set_up_args(tmp_path, cache),
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=logs[r], stderr=subprocess.STDOUT) for r in range(2)]
    try:
        if how != "stopped-before-joining":
            deadline = time.time() + 120
            while not cache.exists():
                assert time.time() < deadline and procs[0].poll() is None, \
                    (tmp_path / "rank0.log").read_text()[-2000:]
                time.sleep(0.005)
        os.kill(procs[1].pid, signal.SIGKILL if how.startswith("killed") else signal.SIGSTOP)
        t_lost = time.time()
        rc0 = procs[0].wait(timeout=TIMEOUT + 60)
        waited = time.time() - t_lost
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
        for f in logs:
            f.close()
    out0 = (tmp_path / "rank0.log").read_text()
    assert rc0 == 1, (rc0, out0[-2000:])
    assert "Traceback" not in out0, out0[-3000:]
    errors = [ln for ln in out0.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1, out0[-3000:]
    line = errors[0]
    assert line.startswith("asyncpp-train: error: rank 0: "), line
    assert "waiting for rank 1" in line, line
    phase = "joining the process group" if how == "stopped-before-joining" else \
        ("the start-up" if "the start-up" in line else "the pipeline set-up")
    assert phase in line, line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step ran: it was set-up
    if how.startswith("killed"):
        assert "the peer is gone" in line and waited <= TIMEOUT + 45, (waited, line)
    else:
        assert f"within the {TIMEOUT:g} s timeout" in line, line
        assert TIMEOUT - 0.5 <= waited <= TIMEOUT + 45, waited
