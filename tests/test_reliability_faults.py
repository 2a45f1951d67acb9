"""Nothing lost, in one process: checkpoint retention after a damaged checkpoint was skipped,
temporary files a kill -9 leaves, repeated signals, and the messages of a full disk, a
damaged checkpoint and a non-finite loss. Each test reproduces the fault the way it happens
(real runs of ``asyncpp-train``, real signals, real files); the torchrun half is
``test_reliability_torchrun_faults.py``.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncpp.train import checkpoint as ckpt_io
from asyncpp.train.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

COMMON = ["--data.max_documents", "60", "--data.seq_len", "16", "--train.batch_size", "4",
          "--train.eval_batches", "1", "--train.eval_every", "0", "--log.progress", "false",
          "--log.plot", "false", "--log.tensorboard", "off", "--run.threads", "1"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("asyncpp-cache")


def _run(args, cwd, cache, timeout=180, **env):
    full = {**os.environ, "ASYNCPP_CACHE": str(cache), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-m", "asyncpp.train.cli", *args], cwd=cwd,
                          env=full, capture_output=True, text=True, timeout=timeout)


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _loadable(run: Path) -> list[int]:
    out = []
    for step, path in ckpt_io.list_checkpoints(run):
        try:
            ckpt_io.load_checkpoint(path)
            out.append(step)
        except ValueError:
            pass
    return out


# -- retention ------------------------------------------------------------------------------
def test_retention_after_a_skipped_damaged_checkpoint_keeps_the_one_just_written(tmp_path,
                                                                                  cache):
    """keep_checkpoints 1 after resuming past a damaged newest checkpoint: the step just written
    survives (the old rule kept the damaged one and deleted it), and the run resumes again."""
    base = [*COMMON, "--run.dir", "run", "--train.steps", "12", "--train.checkpoint_every", "4"]
    r = _run([*base, "--train.stop_after", "8"], tmp_path, cache)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    _flip_middle_byte(run / "checkpoints" / "step-00000008.pt")
    r = _run([*base, "--resume", "--train.keep_checkpoints", "1", "--train.stop_after", "2"],
             tmp_path, cache)
    assert r.returncode == 0, r.stderr
    assert "skipped step-00000008.pt" in r.stderr and "resuming from step-00000004.pt" in r.stderr
    assert "weights_only" not in r.stderr and "Weights only" not in r.stderr, r.stderr
    assert [s for s, _ in ckpt_io.list_checkpoints(run)] == [6, 8]  # 8: damaged, left alone
    assert _loadable(run) == [6]
    r = _run([*base, "--resume", "--train.keep_checkpoints", "1"], tmp_path, cache)
    assert r.returncode == 0, r.stderr
    assert "resuming from step-00000006.pt" in r.stderr
    assert [rec["step"] for rec in read_metrics(run)] == list(range(1, 13))
    assert _loadable(run) == [12]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.booleans()), min_size=0, max_size=12),
       st.integers(0, 30), st.integers(1, 4))
def test_retention_never_loses_a_resume_point(tmp_path_factory, disk, written, keep):
    """Any set of checkpoints on disk, each valid or damaged, and any step just written:
    retention keeps that step, deletes nothing above it, keeps min(keep, valid ones at or below
    it) valid checkpoints, and deletes only checkpoints older than every valid one it keeps."""
    run = tmp_path_factory.mktemp("r")
    valid = {s: ok for s, ok in disk}
    valid[written] = True
    d = ckpt_io.checkpoint_dir(run)
    d.mkdir(parents=True)
    for s in valid:
        (d / f"step-{s:08d}.pt").write_bytes(b"x")
    calls = []

    def is_valid(step, path):
        calls.append(step)
        return valid[step]

    stale = {int(p.name[5:13]) for p in ckpt_io.stale_checkpoints(run, keep, written, is_valid)}
    kept = set(valid) - stale
    assert written in kept and written not in calls
    assert all(s <= written for s in stale)
    good_below = sorted(s for s in valid if s <= written and valid[s])
    kept_good = sorted(s for s in kept if s <= written and valid[s])
    assert kept_good[-min(keep, len(good_below)):] == good_below[-min(keep, len(good_below)):]
    assert len(kept_good) >= min(keep, len(good_below))
    if stale:
        assert max(stale) < min(s for s in kept_good[-keep:])


# -- orphaned temporary files --------------------------------------------------------------
KILL_IN_WRITE = r"""
import os, signal, sys, torch
real = torch.save
count = {"n": 0}
def save(obj, f, *a, **k):
    count["n"] += 1
    if count["n"] == 2:        # the second checkpoint: half written, then kill -9
        f.write(b"PK\x03\x04 half a checkpoint")
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return real(obj, f, *a, **k)
torch.save = save
from asyncpp.train import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_kill_during_a_checkpoint_write_leaves_no_orphan_after_the_next_start(tmp_path,
                                                                                  cache):
    args = [*COMMON, "--run.dir", "run", "--train.steps", "6", "--train.checkpoint_every", "2"]
    env = {**os.environ, "ASYNCPP_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", KILL_IN_WRITE, *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == -signal.SIGKILL, r.stderr
    d = tmp_path / "run" / "checkpoints"
    orphans = [p.name for p in d.iterdir() if p.name.endswith(".tmp")]
    assert len(orphans) == 1 and orphans[0].startswith(".step-00000004.pt."), orphans
    r = _run([*args, "--resume"], tmp_path, cache)
    assert r.returncode == 0, r.stderr
    assert not [p for p in d.rglob("*.tmp")], sorted(p.name for p in d.iterdir())
    assert [rec["step"] for rec in read_metrics(tmp_path / "run")] == list(range(1, 7))


# -- signals -------------------------------------------------------------------------------
# The interrupt checkpoint is written slowly (as on a network file system), so the second signal
# provably arrives while it is being written: its temporary file is on disk.
SLOW_SAVE = r"""
import sys, time, torch
real = torch.save
def save(obj, f, *a, **k):
    real(obj, f, *a, **k)
    f.flush()
    time.sleep(1.5)
torch.save = save
from asyncpp.train import cli
sys.exit(cli.main(sys.argv[1:]))
"""
LONG = [*COMMON, "--run.dir", "run", "--train.steps", "2000", "--train.checkpoint_every", "0"]


def _writing_checkpoint(p: subprocess.Popen, run: Path, sig: int) -> None:
    """Once the run trains, send ``sig`` and wait until the interrupt checkpoint is being
    written (its temporary file exists)."""
    deadline = time.monotonic() + 120
    while not ((run / "metrics.jsonl").is_file() and len(read_metrics(run)) >= 3):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()[1]
        time.sleep(0.02)
    p.send_signal(sig)
    while not list((run / "checkpoints").glob(".step-*.tmp")):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()[1]
        time.sleep(0.005)


def _slow_popen(cwd, cache):
    env = {**os.environ, "ASYNCPP_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", SLOW_SAVE, *LONG], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_sigterm_does_not_cut_the_interrupt_checkpoint(tmp_path, cache):
    """A cgroup kill delivers SIGTERM twice (the launcher forwards its own copy): the second
    one, arriving while the interrupt checkpoint is written, must not end the process."""
    p = _slow_popen(tmp_path, cache)
    run = tmp_path / "run"
    _writing_checkpoint(p, run, signal.SIGTERM)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "interrupted; checkpoint written at step" in err
    step, path = ckpt_io.list_checkpoints(run)[-1]
    assert ckpt_io.load_checkpoint(path)["step"] == step == len(read_metrics(run))


def test_ctrl_c_twice_ends_at_once(tmp_path, cache):
    p = _slow_popen(tmp_path, cache)
    _writing_checkpoint(p, tmp_path / "run", signal.SIGINT)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGINT


# -- messages ------------------------------------------------------------------------------
FULL_DISK = r"""
import errno, sys, torch
real = torch.save
count = {"n": 0}
def save(obj, f, *a, **k):
    count["n"] += 1
    if count["n"] == 2:
        raise OSError(errno.ENOSPC, "No space left on device")  # no file name, as torch raises it
    return real(obj, f, *a, **k)
torch.save = save
from asyncpp.train import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_full_disk_is_one_line_without_none(tmp_path, cache):
    args = [*COMMON, "--run.dir", "run", "--train.steps", "6", "--train.checkpoint_every", "2"]
    env = {**os.environ, "ASYNCPP_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", FULL_DISK, *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert errors == ["asyncpp-train: error: writing the run failed (No space left on device); "
                      "the newest checkpoint is step-00000002.pt; fix the cause, then continue "
                      f"with --resume --run.dir {Path('run')}"], r.stderr
    assert "Traceback" not in r.stderr and "None" not in r.stderr


def test_a_non_finite_loss_is_reported_once(tmp_path, cache):
    r = _run([*COMMON, "--run.dir", "run", "--train.steps", "20", "--optimizer.name", "adamw",
              "--optimizer.lr", "1e30"], tmp_path, cache)
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "non-finite" in ln]
    assert len(lines) == 1 and lines[0].startswith("asyncpp-train: error: non-finite"), r.stderr


def test_a_damaged_checkpoint_is_named_in_a_whole_sentence(tmp_path):
    """A flipped byte that torch's safe unpickler refuses: the reason is a whole phrase, without
    torch's advice to load with ``weights_only=False`` (never safe for a damaged file)."""
    ckpt_io.save_checkpoint(tmp_path, {"step": 1, "model": {"w": torch.arange(64.0)}})
    path = ckpt_io.list_checkpoints(tmp_path)[0][1]
    orig = path.read_bytes()
    refused = 0
    for offset in range(0, len(orig), 3):
        data = bytearray(orig)
        data[offset] ^= 0xFF
        path.write_bytes(bytes(data))
        try:
            torch.load(path, weights_only=True)
            continue
        except Exception as e:  # noqa: BLE001 - whatever torch raises for this byte
            theirs = str(e)
        with pytest.raises(ValueError) as e:
            ckpt_io.load_checkpoint(path)
        text = str(e.value)
        assert text.endswith("); it is truncated or corrupt"), text
        assert "weights_only" not in text and "Weights only" not in text, text
        reason = text[text.index("cannot be read (") + 16:-len("); it is truncated or corrupt")]
        assert reason and not reason.endswith((":", ",", " ")), text
        if theirs.startswith("Weights only load failed"):
            refused += 1
            assert reason.startswith("damaged pickled data"), text
    assert refused > 0  # the case the message is about was met


def test_disk_error_text_names_the_file_only_when_known():
    assert ckpt_io.disk_error_text(OSError(errno.ENOSPC, "No space left on device")) == \
        "No space left on device"
    assert ckpt_io.disk_error_text(OSError(errno.ENOSPC, "No space left on device", "/r/x")) \
        == "No space left on device: /r/x"
