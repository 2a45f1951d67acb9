"""Reliability of ``asyncpp-train`` (issue 10, single process): exact resume after a real
SIGTERM, crashes while a checkpoint is written, damaged and malicious checkpoints, non-finite
losses from a real trigger, unwritable / full run directories, the bad-input contract (exit 2,
one line naming the value and the fix, nothing written or overwritten) and where a run writes.

Measured failure-detection times are asserted with generous bounds and printed with ``-s``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from asyncpp.train import checkpoint as ckpt_io
from asyncpp.train.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

COMMON = ["--data.max_documents", "60", "--data.seq_len", "16", "--train.batch_size", "4",
          "--train.eval_batches", "1", "--train.eval_every", "0", "--log.progress", "false",
          "--log.plot", "false", "--log.tensorboard", "off", "--run.threads", "1"]
# Everything a resumed run must restore: 2BW pending gradients, the EF buffer, Muon + AdamW
# state of two stages, data position and RNG.
ASYNC = ["--optimizer.name", "muon", "--optimizer.lr", "0.02", "--pipeline.schedule", "2bw",
         "--pipeline.stages", "2", "--pipeline.microbatches", "2", "--delay.correction", "ef",
         "--simulate"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A tokenizer cache shared by this module's runs (trained once)."""
    return tmp_path_factory.mktemp("asyncpp-cache")


def _env(cache, **extra):
    env = {**os.environ, "ASYNCPP_CACHE": str(cache), "OMP_NUM_THREADS": "1", **extra}
    return {k: v for k, v in env.items() if v is not None}


def _popen(args, cwd, cache, **env):
    return subprocess.Popen([sys.executable, "-m", "asyncpp.train.cli", *args], cwd=cwd,
                            env=_env(cache, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _main(args, cwd, cache, monkeypatch, capsys):
    """``cli.main`` in this process: (exit code, stdout, stderr)."""
    from asyncpp.train import cli

    monkeypatch.chdir(cwd)
    monkeypatch.setenv("ASYNCPP_CACHE", str(cache))
    capsys.readouterr()
    try:
        code = cli.main(args)
    except SystemExit as e:  # argparse
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def snapshot(root: Path, skip=()) -> dict:
    """{relative path: sha256} of every file under ``root`` (folders as ``/``)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts and rel.parts[0] in skip:
            continue
        out[str(rel)] = "/" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def losses(run_dir, key="train_loss"):
    return [r.get(key) for r in read_metrics(run_dir)]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, cache):
    """A run stopped after 2 of 4 steps (a checkpoint to resume from), made once."""
    from asyncpp.train import cli

    run = tmp_path_factory.mktemp("stopped") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASYNCPP_CACHE", str(cache))
        assert cli.main(["--run.dir", str(run), "--train.steps", "4", "--train.stop_after", "2",
                         *COMMON]) == 0
    return run


# -- 1. exact resume after a real SIGTERM ----------------------------------------------------------
def test_sigterm_checkpoints_and_resume_is_bit_identical(tmp_path, cache, monkeypatch, capsys):
    """Also checks where the uninterrupted run writes: its run directory and $ASYNCPP_CACHE
    only (not $HOME, not $TMPDIR, nothing else in its working directory)."""
    steps = ["--train.steps", "40", "--train.log_every", "1"]
    home, tmp, cwd = tmp_path / "home", tmp_path / "tmp", tmp_path / "cwd"
    for d in (home, tmp, cwd):
        d.mkdir()
    full = _popen(["--run.dir", "full", *steps, *ASYNC, *COMMON], cwd, cache, HOME=str(home),
                  TMPDIR=str(tmp), XDG_CACHE_HOME=None, MPLCONFIGDIR=None)
    part = _popen(["--run.dir", "part", *steps, *ASYNC, *COMMON], tmp_path, cache)
    metrics = tmp_path / "part" / "metrics.jsonl"
    deadline = time.monotonic() + 90
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
        assert part.poll() is None and time.monotonic() < deadline, part.stderr.read()
        time.sleep(0.01)
    t_sig = time.monotonic()
    part.send_signal(signal.SIGTERM)
    t_ckpt = None
    while part.poll() is None and time.monotonic() < t_sig + 60:
        if t_ckpt is None and ckpt_io.list_checkpoints(tmp_path / "part"):
            t_ckpt = time.monotonic() - t_sig
        time.sleep(0.005)
    _, err = part.communicate(timeout=60)
    t_exit = time.monotonic() - t_sig
    assert part.returncode == 128 + signal.SIGTERM, err
    assert "interrupted; checkpoint written at step" in err
    stopped = ckpt_io.list_checkpoints(tmp_path / "part")
    k = stopped[-1][0]
    assert 3 <= k < 40, k  # stopped mid-run, after finishing the step in flight
    ck = ckpt_io.load_checkpoint(stopped[-1][1])
    assert ck["sampler"] and ck["rng"]["torch"].numel() > 0
    opts = ck["optimizers"]
    assert len(opts) == 2 and all(o["step_count"] == k for o in opts)
    assert all(len(q) for o in opts for q in o["queues"])  # pending delayed gradients
    assert any(u is not None for o in opts for u in o["prev_update"])  # EF buffer
    assert all(o["optimizer"]["state"] for o in opts)  # Muon momentum / AdamW moments
    # Measured on a loaded 2-core box: checkpoint ~0.1 s after the signal (the step in
    # flight finishes first), exit ~2-4 s (torch's interpreter teardown dominates).
    with capsys.disabled():
        print(f"\nSIGTERM -> checkpoint of step {k} after {t_ckpt:.2f}s -> exit 143 after "
              f"{t_exit:.2f}s")
    assert t_ckpt is not None and t_ckpt < 10 and t_exit < 30

    # Resume in this process (the same arithmetic as a fresh process: one thread, CPU).
    code, _, err = _main(["--run.dir", "part", "--resume", "--log.progress", "false"],
                         tmp_path, cache, monkeypatch, capsys)
    assert code == 0, err
    _, err = full.communicate(timeout=120)
    assert full.returncode == 0, err
    a, b = read_metrics(cwd / "full"), read_metrics(tmp_path / "part")
    assert len(a) == len(b) == 40
    for key in ("step", "train_loss", "grad_norm", "lr", "delay", "val_loss"):
        assert [r.get(key) for r in a] == [r.get(key) for r in b], key  # bit-identical
    sa = ckpt_io.load_checkpoint(ckpt_io.list_checkpoints(cwd / "full")[-1][1])
    sb = ckpt_io.load_checkpoint(ckpt_io.list_checkpoints(tmp_path / "part")[-1][1])
    assert all(torch.equal(sa["model"][n], sb["model"][n]) for n in sa["model"])
    assert [x.name for x in cwd.iterdir()] == ["full"]
    # torch itself may leave an empty $TMPDIR/torchinductor_<user> folder at import.
    assert not any(home.iterdir()) and not [f for f in tmp.rglob("*") if f.is_file()]
    assert {x.name for x in (cwd / "full").iterdir()} == {
        "config.toml", "config.json", "metrics.jsonl", "summary.json", "tokenizer.json",
        "checkpoints"}


# -- 3. crash while a checkpoint is written ----------------------------------------------------
CRASH = r"""
import os, signal, sys, torch
from asyncpp.train import checkpoint as c
run = sys.argv[1]
c.save_checkpoint(run, {"step": 1, "model": {"w": torch.ones(1000)}})
where = sys.argv[2]
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
if where == "write":   # killed half-way through writing the payload
    real = torch.serialization._open_zipfile_writer
    class Half:
        def __init__(self, f): self.f = f; f.write(b"PK\x03\x04partial")
        def __enter__(self): die()
        def __exit__(self, *a): pass
    torch.serialization._open_zipfile_writer = Half
else:                  # killed after the complete temp file, before/at the rename
    setattr(os, where, die)
c.save_checkpoint(run, {"step": 2, "model": {"w": torch.zeros(1000)}})
"""


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, where):
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", CRASH, str(run), where], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert [s for s, _ in ckpt_io.list_checkpoints(run)] == [1]  # no step 2, not even partial
    ck = ckpt_io.load_checkpoint(ckpt_io.list_checkpoints(run)[-1][1])
    assert torch.equal(ck["model"]["w"], torch.ones(1000))
    leftovers = [p.name for p in (run / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and leftovers[0].startswith(".step-00000002.pt.")  # ignored
    ckpt_io.save_checkpoint(run, {"step": 2, "model": {"w": torch.zeros(3)}}, keep=2)
    assert [s for s, _ in ckpt_io.list_checkpoints(run)] == [1, 2]


def test_disk_full_during_a_checkpoint_write_fails_cleanly(tmp_path, cache, monkeypatch,
                                                           capsys):
    real = torch.save
    calls = {"n": 0}

    def full_disk(obj, f, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            f.write(b"PK\x03\x04 half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device", str(f.name))
        return real(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", full_disk)
    code, _, err = _main(["--run.dir", "run", "--train.steps", "5", "--train.checkpoint_every",
                          "1", *COMMON], tmp_path, cache, monkeypatch, capsys)
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert "No space left on device" in last and "--resume" in last and "Traceback" not in err
    run = tmp_path / "run"
    assert [s for s, _ in ckpt_io.list_checkpoints(run)] == [1, 2]
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    assert ckpt_io.load_checkpoint(ckpt_io.list_checkpoints(run)[-1][1])["step"] == 2
    monkeypatch.setattr(torch, "save", real)
    code, _, err = _main(["--run.dir", "run", "--resume"], tmp_path, cache, monkeypatch, capsys)
    assert code == 0, err
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4, 5]


class Evil:
    """A pickle that runs a shell command when loaded without ``weights_only``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _damage(path: Path, how: str, marker: Path) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(os.urandom(4096))
    elif how == "flipped":  # one byte of a tensor record changed: the zip CRC catches it
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    elif how == "not-a-checkpoint":
        torch.save({"weights": torch.ones(2)}, path)
    elif how == "malicious":
        torch.save({"format": ckpt_io.FORMAT, "step": 2, "x": Evil(marker)}, path)


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "flipped",
                                 "not-a-checkpoint", "malicious"])
def test_damaged_or_malicious_checkpoint_is_refused(tmp_path, cache, stopped_run, how,
                                                    monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    marker = tmp_path / "pwned"
    _damage(ckpt_io.list_checkpoints(run)[-1][1], how, marker)
    before = snapshot(tmp_path)
    code, _, err = _main(["--run.dir", "run", "--resume"], tmp_path, cache, monkeypatch, capsys)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("asyncpp-train: error: ") and "step-00000002.pt" in line
    assert ("not an asyncpp checkpoint" if how == "not-a-checkpoint" else
            "truncated or corrupt") in line
    assert "checksum" in line or how != "flipped"
    assert "Traceback" not in err and snapshot(tmp_path) == before  # nothing written
    assert not marker.exists()
    if how == "malicious":  # the payload is live: an unsafe load would have run it
        torch.load(ckpt_io.list_checkpoints(run)[-1][1], weights_only=False)
        assert marker.exists()


# -- 4. non-finite loss / gradient from a real trigger ---------------------------------------------
def test_huge_lr_stops_at_the_non_finite_step_and_keeps_the_checkpoints(tmp_path, cache,
                                                                        monkeypatch, capsys):
    args = ["--train.steps", "6", "--train.checkpoint_every", "1", "--optimizer.lr", "1e30",
            *COMMON]
    t0 = time.monotonic()
    code, _, err = _main(["--run.dir", "stop", *args], tmp_path, cache, monkeypatch, capsys)
    line = err.strip().splitlines()[-1]
    assert code == 1, err
    assert "non-finite gradient at step 2" in line and "step-00000001.pt" in line
    assert "train.on_nonfinite='skip'" in line
    with capsys.disabled():
        print(f"\nnon-finite detected at step 2; run ended {time.monotonic() - t0:.2f}s after "
              "its start")
    found = ckpt_io.list_checkpoints(tmp_path / "stop")
    assert [s for s, _ in found] == [1]  # nothing written for the bad step
    ck = ckpt_io.load_checkpoint(found[0][1])
    assert all(torch.isfinite(v).all() for v in ck["model"].values())
    assert [r["step"] for r in read_metrics(tmp_path / "stop")] == [1]

    code, _, err = _main(["--run.dir", "skip", "--train.on_nonfinite", "skip", *args],
                         tmp_path, cache, monkeypatch, capsys)
    assert code == 0, err
    recs = read_metrics(tmp_path / "skip")
    assert [r.get("skipped", False) for r in recs] == [False] + [True] * 5
    ck = ckpt_io.load_checkpoint(ckpt_io.list_checkpoints(tmp_path / "skip")[-1][1])
    assert all(torch.isfinite(v).all() for v in ck["model"].values())  # no NaN got in


# -- 5. unwritable / full run directory ------------------------------------------------------------
def test_unwritable_or_full_run_dir_is_refused_before_training(tmp_path, cache, monkeypatch,
                                                              capsys):
    (tmp_path / "afile").write_text("x")
    cases = [("afile/run", "is below"), ("afile/a/b", "which is a file"),
             ("/proc/asyncpp-run", "cannot write to '/proc'")]
    for run_dir, msg in cases:
        before = snapshot(tmp_path)
        code, _, err = _main(["--run.dir", run_dir, *COMMON], tmp_path, cache, monkeypatch,
                             capsys)
        assert code == 2 and msg in err.strip().splitlines()[-1], (run_dir, err)
        assert snapshot(tmp_path) == before
    # Disk full: too little free space for the checkpoints (the file system is faked).
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1 << 20))
    code, _, err = _main(["--run.dir", "run", *COMMON], tmp_path, cache, monkeypatch, capsys)
    line = err.strip().splitlines()[-1]
    assert code == 2 and "only 1.0 MiB free" in line and "keep_checkpoints" in line, err
    assert not (tmp_path / "run").exists()


# -- bad input: exit 2, one line naming the value and the fix, nothing written or overwritten ----
TOMLS = {
    "malformed.toml": "[train\nsteps = 3\n",
    "unknown.toml": "[train]\nstepz = 3\n",
    "section.toml": "[trainer]\nsteps = 3\n",
    "type.toml": '[train]\nsteps = "3"\n',
    "range.toml": "[optimizer]\nlr = -1.0\n",
    "nan.toml": "[optimizer]\nlr = nan\n",
    "notatable.toml": "train = 3\n",
    "eval.toml": '[train]\nsteps = "__import__(\'os\').system(\'touch pwned\')"\n',
    "binary.toml": None,
}
PIPE = ["--pipeline.schedule", "2bw", "--pipeline.stages", "2"]
BAD_INPUT = [
    # (arguments, expected text in the one-line message, extra environment)
    (["--config", "malformed.toml"], "is not valid TOML", {}),
    (["--config", "unknown.toml"], "unknown config key 'train.stepz'; did you mean 'steps'", {}),
    (["--config", "section.toml"], "unknown config key 'trainer'", {}),
    (["--config", "type.toml"], "train.steps must be an integer, got '3'", {}),
    (["--config", "range.toml"], "optimizer.lr=-1.0 is out of range; it must be >= 0", {}),
    (["--config", "nan.toml"], "optimizer.lr must be a finite number", {}),
    (["--config", "notatable.toml"], "[train] must be a table", {}),
    (["--config", "eval.toml"], "train.steps must be an integer", {}),
    (["--config", "binary.toml"], "is not UTF-8 text", {}),
    (["--config", "missing.toml"], "does not exist", {}),
    (["--train.stepz", "3"], "did you mean --train.steps", {}),
    (["--train.steps", "$(touch pwned)"], "--train.steps must be an integer", {}),
    (["--train.steps", "0"], "train.steps=0 is out of range", {}),
    (["--optimizer.beta1", "1.5"], "optimizer.beta1=1.5 is out of range", {}),
    (["--optimizer.lr", "1e400"], "optimizer.lr must be a finite number", {}),
    # 2BW needs m >= P - 1 (two weight versions suffice then): 3 stages, 1 microbatch.
    ([*PIPE, "--pipeline.stages", "3", "--model.n_layers", "3", "--pipeline.microbatches", "1"],
     "--pipeline.microbatches 2", {}),
    (["--pipeline.schedule", "gpipe", "--pipeline.stages", "3"], "exceeds the model's 2 layers",
     {}),
    (["--pipeline.schedule", "gpipe", "--pipeline.stages", "2"],
     "world size 3 is not divisible by pipeline.stages=2", {"RANK": "0", "WORLD_SIZE": "3"}),
    (["--delay.correction", "taylor"], "--pipeline.schedule 2bw", {}),
    (["--delay.correction", "taylor", "--pipeline.schedule", "gpipe"], "asynchronous", {}),
    (["--data.source", "files", "--data.path", "nowhere/*.txt"], "nowhere", {}),
    (["--data.source", "files", "--data.path", "empty.txt"], "empty.txt", {}),
    (["--data.source", "shards", "--data.path", "empty.bin"], "empty.bin", {}),
    (["--data.tokenizer", "TOKENIZER", "--model.vocab_size", "300"],
     "has 512 tokens but model.vocab_size is 300; set --model.vocab_size 512", {}),
    (["--data.tokenizer", "nowhere/tokenizer.json"], "neither a tokenizer.json", {}),
    (["--resume", "--run.dir", "fresh"], "no checkpoint in 'fresh'", {}),
    (["--resume", "--model.dim", "32"], "model.dim=64, this run has 32", {}),
    (["--resume", "--optimizer.name", "muon"], "optimizer.name='adamw', this run has 'muon'", {}),
    (["--resume", "--train.steps", "9"], "train.steps=4, this run has 9", {}),
    ([], "already holds files; pass --resume", {}),
]


@pytest.mark.parametrize("args,msg,env", BAD_INPUT,
                         ids=[f"{i}-{m[:28]}" for i, (_, m, _) in enumerate(BAD_INPUT)])
def test_bad_input_exits_2_with_one_line_and_touches_nothing(tmp_path, cache, stopped_run, args,
                                                             msg, env, monkeypatch, capsys):
    for name, text in TOMLS.items():
        f = tmp_path / name
        f.write_bytes(b"\xff\xfe[train]\x00" if text is None else text.encode())
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "empty.bin").write_bytes(b"")
    shutil.copytree(stopped_run, tmp_path / "run")  # an existing run that must stay intact
    args = [str(stopped_run / "tokenizer.json") if a == "TOKENIZER" else a for a in args]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if "--run.dir" not in args:  # resume the existing run, or start a new one next to it
        args = [*args, "--run.dir", "run" if "--resume" in args or not args else "out"]
    resume_ok = {"--train.steps", "--model.dim", "--optimizer.name"} & set(args)
    rest = [] if "--resume" in args and resume_ok else COMMON
    before = snapshot(tmp_path)
    code, out, err = _main([*args, *rest], tmp_path, cache, monkeypatch, capsys)
    assert code == 2, (args, out, err)
    line = err.strip().splitlines()[-1]
    assert line.startswith("asyncpp-train: error: ") and msg in line, (args, err)
    assert "Traceback" not in err and len(line) < 400
    assert snapshot(tmp_path) == before, args  # nothing written or overwritten
    assert not (tmp_path / "pwned").exists()


# -- security: where a run writes -----------------------------------------------------------
def test_cache_location_is_documented_and_configurable(monkeypatch, tmp_path):
    from asyncpp.data.cache import cache_dir
    from asyncpp.train.cli import EPILOG

    assert "$ASYNCPP_CACHE" in EPILOG and "data.cache_dir" in EPILOG
    monkeypatch.delenv("ASYNCPP_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "asyncpp"
    monkeypatch.setenv("ASYNCPP_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    assert cache_dir(str(tmp_path / "d")) == tmp_path / "d"


# -- 7. messages, retention, resume fallback ------------------------------------------------------
class _Recorder:
    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)

    def flush(self):
        pass


def test_each_message_is_written_whole_in_one_call():
    from asyncpp.train.cli import say

    rec = _Recorder()
    say("rank 1: interrupted; exit status 143", rec)
    say("error: two keys differ:\n  a: rank 0 has 1, rank 1 has 2", rec)
    assert rec.writes == [
        "asyncpp-train: rank 1: interrupted; exit status 143\n",
        "asyncpp-train: error: two keys differ:\nasyncpp-train:   a: rank 0 has 1, rank 1 has 2\n"]


WRITER = """
import sys
from asyncpp.train.cli import say
for i in range(int(sys.argv[2])):
    say(f"rank {sys.argv[1]}: message {i} " + "x" * 150)
"""


def test_two_processes_writing_to_one_unbuffered_stream_never_share_a_line(tmp_path):
    """The situation under torchrun: two ranks, one inherited output file, unbuffered. Each
    message is one write(2) of whole lines, so no line holds parts of two messages."""
    n = 3000
    with open(tmp_path / "out", "w") as f:
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(r), str(n)], stdout=f,
                                  stderr=subprocess.STDOUT, env={**os.environ,
                                                                 "PYTHONUNBUFFERED": "1"})
                 for r in range(2)]
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
    lines = (tmp_path / "out").read_text().splitlines()
    expected = {f"asyncpp-train: rank {r}: message {i} " + "x" * 150
                for r in range(2) for i in range(n)}
    assert len(lines) == 2 * n and set(lines) == expected


def test_rank_differences_name_every_rank_value_once_per_key():
    from asyncpp.train.config import rank_differences

    a = {"run": {"dir": "a", "seed": 0}, "optimizer": {"lr": 0.1}}
    b = {"run": {"dir": "b", "seed": 0}, "optimizer": {"lr": 0.1}}
    c = {"run": {"dir": "a", "seed": 0}, "optimizer": {"lr": 0.1, "extra": True}}
    assert rank_differences([a, a]) == []
    assert rank_differences([a, b, a, c]) == [
        "optimizer.extra: ranks 0, 1, 2 have (unset), rank 3 has True",
        "run.dir: ranks 0, 2, 3 have 'a', rank 1 has 'b'"]


def test_saving_a_step_twice_counts_it_once(tmp_path):
    run = tmp_path / "run"
    for step in (3, 6, 6):  # the cadence's step 6 and the final checkpoint of step 6
        ckpt_io.save_checkpoint(run, {"step": step, "model": {"w": torch.zeros(2)}}, keep=2)
    assert [s for s, _ in ckpt_io.list_checkpoints(run)] == [3, 6]
    ckpt_io.save_checkpoint(run, {"step": 9, "model": {"w": torch.zeros(2)}}, keep=2)
    assert [s for s, _ in ckpt_io.list_checkpoints(run)] == [6, 9]


@pytest.mark.parametrize("steps,every,keep,kept", [(6, 3, 2, [3, 6]), (6, 3, 1, [6]),
                                                   (7, 3, 2, [6, 7]), (6, 2, 3, [2, 4, 6])])
def test_a_run_keeps_exactly_keep_checkpoints(tmp_path, cache, steps, every, keep, kept,
                                              monkeypatch, capsys):
    code, _, err = _main(["--run.dir", "run", "--train.steps", str(steps),
                          "--train.checkpoint_every", str(every), "--train.keep_checkpoints",
                          str(keep), *COMMON], tmp_path, cache, monkeypatch, capsys)
    assert code == 0, err
    assert [s for s, _ in ckpt_io.list_checkpoints(tmp_path / "run")] == kept


def test_resume_skips_a_damaged_newest_checkpoint_and_says_so(tmp_path, cache, monkeypatch,
                                                              capsys):
    """Checkpoints at steps 2, 4, 6; step 6 gets one flipped bit (and step 4 is fine): the
    resumed run names the skipped file and why in one line, continues from step 4 exactly as
    the uninterrupted run did, and leaves the damaged file as it was."""
    args = ["--train.steps", "8", "--train.checkpoint_every", "2", "--train.keep_checkpoints",
            "3", *COMMON]
    code, _, err = _main(["--run.dir", "full", *args], tmp_path, cache, monkeypatch, capsys)
    assert code == 0, err
    code, _, err = _main(["--run.dir", "run", *args, "--train.stop_after", "6"], tmp_path, cache,
                         monkeypatch, capsys)
    assert code == 0, err
    damaged = tmp_path / "run" / "checkpoints" / "step-00000006.pt"
    _damage(damaged, "flipped", tmp_path / "unused")
    before = damaged.read_bytes()
    code, _, err = _main(["--run.dir", "run", "--resume", "--train.stop_after", "1"], tmp_path,
                         cache, monkeypatch, capsys)
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if "skipped" in ln]
    assert notes == ["asyncpp-train: skipped step-00000006.pt: fails its checksum; it is "
                     "truncated or corrupt; resuming from step-00000004.pt"], err
    assert "resumed from step 4" in err and "Traceback" not in err
    assert damaged.read_bytes() == before  # never deleted nor rewritten by the fallback
    assert losses(tmp_path / "run") == losses(tmp_path / "full")[:5]  # exact continuation


def test_resume_with_every_checkpoint_damaged_names_each(tmp_path, cache, stopped_run,
                                                         monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    (step, path), = ckpt_io.list_checkpoints(run)
    older = path.with_name("step-00000001.pt")
    shutil.copyfile(path, older)
    _damage(path, "truncated", tmp_path / "unused")
    _damage(older, "flipped", tmp_path / "unused")
    before = snapshot(tmp_path)
    code, _, err = _main(["--run.dir", "run", "--resume"], tmp_path, cache, monkeypatch, capsys)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("asyncpp-train: error: no checkpoint can be resumed: "), line
    assert "step-00000002.pt: cannot be read" in line and "step-00000001.pt: fails its " \
        "checksum" in line, line
    assert "Traceback" not in err and snapshot(tmp_path) == before
