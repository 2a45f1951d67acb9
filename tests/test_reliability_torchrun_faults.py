"""Nothing lost under ``torchrun`` (2 ranks, gloo, a 2BW + EF pipeline): the paths a cluster
takes. A cgroup-wide SIGTERM (launcher and workers together), a restart before the first
checkpoint, a bad launch over an earlier run, a peer that stalls while checkpointing, a disk
that fills up, and retention after a damaged checkpoint was skipped. Real launches, real
signals, real files; where a fault is injected (a slow or failing write) it is injected into
the real worker through ``sitecustomize``, and the full disk is a real tmpfs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from procs import workers_of as _workers

from asyncpp.train import checkpoint as ckpt_io
from asyncpp.train.metrics import read_metrics

pytestmark = pytest.mark.multiprocess

ARGS = ["--data.max_documents", "60", "--data.seq_len", "16", "--train.batch_size", "4",
        "--train.eval_batches", "1", "--train.eval_every", "0", "--log.progress", "false",
        "--log.plot", "false", "--log.tensorboard", "off", "--run.threads", "1",
        "--pipeline.schedule", "2bw", "--pipeline.stages", "2", "--pipeline.microbatches", "2",
        "--delay.correction", "ef", "--train.final_eval", "sample"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("asyncpp-cache")


def _env(cache: Path, inject: Path | None = None) -> dict:
    env = {**os.environ, "ASYNCPP_CACHE": str(cache), "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    if inject is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(inject), env.get("PYTHONPATH", "")])
    return env


def _launch(cwd: Path, cache: Path, log: Path, *extra: str, restarts: int = 0,
            inject: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         f"--max-restarts={restarts}", "--monitor-interval", "0.1", "-m", "asyncpp.train.cli",
         "--run.dir", "run", *ARGS, *extra],
        cwd=cwd, env=_env(cache, inject), stdout=open(log, "w"), stderr=subprocess.STDOUT,
        start_new_session=True)


def _wait_steps(tr: subprocess.Popen, run: Path, steps: int, log: Path) -> dict[int, int]:
    deadline = time.monotonic() + 180
    while not ((run / "metrics.jsonl").is_file() and len(read_metrics(run)) >= steps
               and len(_workers(tr.pid)) == 2):
        assert tr.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.01)
    return _workers(tr.pid)


def _complete(run: Path) -> int:
    """The newest checkpoint's step, after checking its manifest and both shards load."""
    step, path = ckpt_io.list_checkpoints(run)[-1]
    assert ckpt_io.load_checkpoint(path)["step"] == step
    for r in range(2):
        assert ckpt_io.load_checkpoint(path.with_suffix(".shards")
                                       / f"rank-{r:05d}.pt")["step"] == step
    return step


def _inject(tmp_path: Path, code: str) -> Path:
    """A folder whose ``sitecustomize.py`` runs ``code`` in every worker at start-up."""
    d = tmp_path / "inject"
    d.mkdir()
    (d / "sitecustomize.py").write_text(textwrap.dedent(code))
    return d


def _no_traceback(text: str) -> None:
    """No traceback through asyncpp's code (torchrun prints its own ChildFailedError whenever a
    worker exits non-zero; that one names no asyncpp frame)."""
    assert "src/asyncpp/" not in text and "site-packages/asyncpp/" not in text, text[-4000:]


# -- a cgroup-wide SIGTERM ------------------------------------------------------------------
def test_sigterm_to_torchrun_and_its_workers_together_writes_the_interrupt_checkpoint(
        tmp_path, cache):
    """Slurm/systemd signal the whole cgroup: every worker gets SIGTERM from outside and again
    from torchrun. Before, the copy ended a rank at once and the run lost everything since the
    last cadence checkpoint (there is none here)."""
    log = tmp_path / "log"
    tr = _launch(tmp_path, cache, log, "--train.steps", "400", "--train.checkpoint_every", "0")
    run = tmp_path / "run"
    workers = _wait_steps(tr, run, 3, log)
    for pid in (tr.pid, *workers.values()):
        os.kill(pid, signal.SIGTERM)
    tr.wait(timeout=60)
    text = log.read_text()
    for r in (0, 1):
        assert f"rank {r}: interrupted; checkpoint written at step" in text, text[-4000:]
    assert "peer is gone" not in text, text[-4000:]
    assert _complete(run) == len(read_metrics(run)) >= 3


# -- restarts -------------------------------------------------------------------------------
def test_a_restart_before_the_first_checkpoint_starts_the_run_afresh(tmp_path, cache):
    """--max-restarts 1 and a rank killed before any checkpoint: the restart used to fail with
    "run directory ... already holds files"; now it starts over and finishes."""
    log = tmp_path / "log"
    tr = _launch(tmp_path, cache, log, "--train.steps", "40", "--train.checkpoint_every", "0",
                 restarts=1)
    run = tmp_path / "run"
    workers = _wait_steps(tr, run, 2, log)
    assert not ckpt_io.list_checkpoints(run)
    os.kill(workers[1], signal.SIGKILL)
    assert tr.wait(timeout=240) == 0, log.read_text()[-4000:]
    text = log.read_text()
    assert "torchrun restart 1: no checkpoint yet; starting the run afresh" in text, text[-3000:]
    assert "already holds files" not in text
    assert [r["step"] for r in read_metrics(run)] == list(range(1, 41))


def test_a_restart_never_replaces_another_launchs_run(tmp_path, cache):
    """A restart count but a run directory this launch did not start (no marker of its own):
    protected as before."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / ".torchrun-launch").write_text("someone-else\n")
    env = {**_env(cache), "RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RESTART_COUNT": "1",
           "TORCHELASTIC_RUN_ID": "this-launch"}
    r = subprocess.run([sys.executable, "-m", "asyncpp.train.cli", "--run.dir", "run",
                        *ARGS[:ARGS.index("--pipeline.schedule")], "--train.steps", "2"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "already holds files" in r.stderr, r.stderr
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'


# -- a bad launch over an earlier run ---------------------------------------------------------
def test_a_launch_that_cannot_work_touches_nothing(tmp_path, cache):
    """The default schedule 'none' under torchrun with --run.overwrite true used to delete the
    earlier run's checkpoints and metrics, then die with a traceback."""
    first = subprocess.run([sys.executable, "-m", "asyncpp.train.cli", "--run.dir", "run",
                            *ARGS[:ARGS.index("--pipeline.schedule")], "--train.steps", "4",
                            "--train.checkpoint_every", "2"],
                           cwd=tmp_path, env=_env(cache), capture_output=True, text=True,
                           timeout=120)
    assert first.returncode == 0, first.stderr
    run = tmp_path / "run"
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    log = tmp_path / "log"
    tr = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "asyncpp.train.cli", "--run.dir", "run",
         *ARGS[:ARGS.index("--pipeline.schedule")], "--train.steps", "5",
         "--run.overwrite", "true"],
        cwd=tmp_path, env=_env(cache), stdout=open(log, "w"), stderr=subprocess.STDOUT)
    assert tr.wait(timeout=120) != 0
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("asyncpp-train: error:")]
    # one line from each rank that got to say it (torchrun stops the others once one exits)
    assert 1 <= len(lines) <= 2 and len(set(lines)) == 1, text[-3000:]
    assert "pipeline.schedule='none' trains in one process" in lines[0]
    _no_traceback(text)
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before


# -- a peer that stalls while checkpointing -------------------------------------------------
SLOW_SHARD = """
import os, time
if os.environ.get("RANK") == "1":
    import asyncpp.train.checkpoint as c
    real = c.save_shard
    def save_shard(path, payload):
        time.sleep(float(os.environ["SLOW_SHARD_S"]))
        return real(path, payload)
    c.save_shard = save_shard
"""


def test_a_stall_during_the_checkpoint_is_one_line_on_each_rank(tmp_path, cache):
    inject = _inject(tmp_path, SLOW_SHARD)
    log = tmp_path / "log"
    os.environ["SLOW_SHARD_S"] = "30"
    try:
        tr = _launch(tmp_path, cache, log, "--train.steps", "6", "--train.checkpoint_every",
                     "2", "--run.checkpoint_timeout_s", "3", inject=inject)
        assert tr.wait(timeout=180) != 0
    finally:
        del os.environ["SLOW_SHARD_S"]
    text = log.read_text()
    assert ("rank 0: the checkpoint of step 2 did not finish within "
            "run.checkpoint_timeout_s=3 s") in text, text[-4000:]
    assert "no checkpoint was written yet" in text
    _no_traceback(text)


def test_a_checkpoint_slower_than_the_peer_timeout_is_not_a_dead_peer(tmp_path, cache):
    """The checkpoint barrier used to share run.peer_timeout_s: a write slower than it (a
    network file system) killed the run."""
    inject = _inject(tmp_path, SLOW_SHARD)
    log = tmp_path / "log"
    os.environ["SLOW_SHARD_S"] = "4"
    try:
        tr = _launch(tmp_path, cache, log, "--train.steps", "4", "--train.checkpoint_every",
                     "2", "--run.peer_timeout_s", "2", inject=inject)
        assert tr.wait(timeout=180) == 0, log.read_text()[-4000:]
    finally:
        del os.environ["SLOW_SHARD_S"]
    assert _complete(tmp_path / "run") == 4


# -- a full disk --------------------------------------------------------------------------------
FILL_AND_RESUME = r"""
set -u
mount -t tmpfs -o size=32m tmpfs "$ROOT/disk"
cd "$ROOT/disk"
python -m torch.distributed.run --standalone --nproc-per-node 2 --monitor-interval 0.1 \
  -m asyncpp.train.cli --run.dir run $ARGS --train.steps 400 --train.checkpoint_every 20 \
  > "$ROOT/full.log" 2>&1 &
T=$!
while [ ! -f run/checkpoints/step-00000020.pt ]; do sleep 0.05; done
# the workers wait while the disk fills: room for the metrics of a few steps, none for the
# next checkpoint, however far a loaded machine let them run
W=$(pgrep -P $T); kill -STOP $W
avail=$(df --output=avail -k . | tail -n 1)
dd if=/dev/zero of=filler bs=1k count=$((avail - 256)) 2>/dev/null
kill -CONT $W
wait $T; echo "exit $?" >> "$ROOT/full.log"
cp -r run "$ROOT/saved"
rm filler
python -m torch.distributed.run --standalone --nproc-per-node 2 --monitor-interval 0.1 \
  -m asyncpp.train.cli --run.dir run $ARGS --train.steps 400 --train.checkpoint_every 20 \
  --train.stop_after 5 --resume > "$ROOT/resume.log" 2>&1
echo "exit $?" >> "$ROOT/resume.log"
"""


def test_a_full_disk_under_torchrun_is_one_line_on_every_rank_and_resume_works(tmp_path,
                                                                              cache):
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -rm (a private mount namespace) for a real full tmpfs")
    (tmp_path / "disk").mkdir()
    env = {**_env(cache), "ROOT": str(tmp_path), "ARGS": " ".join(ARGS),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["unshare", "-rm", "bash", "-c", FILL_AND_RESUME], env=env,
                       capture_output=True, text=True, timeout=400)
    full = (tmp_path / "full.log").read_text()
    assert "exit 1" in full.splitlines()[-1], full[-4000:]
    errors = [ln for ln in full.splitlines() if "error:" in ln]
    assert len(errors) == 2, full[-4000:]  # one line from each rank
    # Which write meets the full disk first depends on the ranks' timing: a shard (every rank
    # then names the failed file) or rank 0's metrics (rank 1 then sees its peer stop).
    disk = [ln for ln in errors if "No space left on device" in ln]
    assert disk and all("None" not in ln for ln in disk), errors
    assert all("the newest checkpoint is step-00000020.pt" in ln for ln in errors), errors
    _no_traceback(full)
    resume = (tmp_path / "resume.log").read_text()
    assert resume.splitlines()[-1] == "exit 0", resume[-4000:] + r.stderr
    assert [rec["step"] for rec in read_metrics(tmp_path / "saved")][:20] == list(range(1, 21))


# -- retention under torchrun ---------------------------------------------------------------
def test_retention_under_torchrun_keeps_the_checkpoint_just_written(tmp_path, cache):
    steps = ["--train.steps", "12", "--train.checkpoint_every", "4"]
    log = tmp_path / "a.log"
    assert _launch(tmp_path, cache, log, *steps, "--train.stop_after", "8").wait(120) == 0, \
        log.read_text()[-3000:]
    run = tmp_path / "run"
    manifest = run / "checkpoints" / "step-00000008.pt"
    data = bytearray(manifest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    manifest.write_bytes(bytes(data))
    log = tmp_path / "b.log"
    assert _launch(tmp_path, cache, log, *steps, "--resume", "--train.keep_checkpoints", "1",
                   "--train.stop_after", "2").wait(120) == 0, log.read_text()[-3000:]
    assert "resuming from step-00000004.pt" in log.read_text()
    assert [s for s, _ in ckpt_io.list_checkpoints(run)] == [6, 8]
    six = run / "checkpoints" / "step-00000006.pt"
    assert ckpt_io.load_checkpoint(six)["step"] == 6
    for r in range(2):
        assert ckpt_io.load_checkpoint(six.with_suffix(".shards") / f"rank-{r:05d}.pt")
    assert not (run / "checkpoints" / "step-00000004.shards").exists()
    log = tmp_path / "c.log"
    assert _launch(tmp_path, cache, log, *steps, "--resume",
                   "--train.keep_checkpoints", "1").wait(120) == 0, log.read_text()[-3000:]
    assert [r["step"] for r in read_metrics(run)] == list(range(1, 13))
