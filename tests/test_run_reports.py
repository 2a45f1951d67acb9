"""What a run tells its user: plain timestamped progress lines when stderr is not a terminal
(no carriage returns), an honest closing line and summary after a resume, and run files
written with the user's umask (0644 under 022), checkpoints and the resumed metrics included."""

from __future__ import annotations

import json
import os
import re
import stat

from asyncpp.train import cli

ARGS = ["--model.name", "tiny", "--data.max_documents", "60", "--data.seq_len", "16",
        "--train.steps", "6", "--train.batch_size", "4", "--train.eval_every", "3",
        "--train.eval_batches", "1", "--train.checkpoint_every", "3", "--run.threads", "1",
        "--log.plot", "false", "--log.tensorboard", "off"]
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d asyncpp-train: step (\d+)/6 loss \d")


def test_plain_lines_resume_summary_and_file_modes(tmp_path, capsys):
    run = tmp_path / "run"
    base = [*ARGS, "--data.cache_dir", str(tmp_path / "cache"), "--run.dir", str(run)]
    old = os.umask(0o022)
    try:
        assert cli.main(base) == 0
        first = capsys.readouterr()
        (run / "checkpoints" / "step-00000006.pt").unlink()
        assert cli.main([*base, "--resume"]) == 0
        second = capsys.readouterr()
    finally:
        os.umask(old)
    assert "\r" not in first.err
    steps = [int(m.group(1)) for ln in first.err.splitlines() if (m := LINE.match(ln))]
    assert steps == [1, 2, 3, 4, 5, 6]  # T = 6 < 20: every step
    assert "val " in next(ln for ln in first.err.splitlines() if " step 3/6 " in ln)
    assert "done: 6 steps in " in first.out
    assert "done: 3 of 6 steps (resumed at step 3) in " in second.out
    assert [int(m.group(1)) for ln in second.err.splitlines() if (m := LINE.match(ln))] \
        == [4, 5, 6]
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["steps"], summary["steps_this_launch"], summary["resumed_from_step"]) \
        == (6, 3, 3)
    files = [run / "metrics.jsonl", run / "summary.json", *(run / "checkpoints").iterdir()]
    assert len(files) == 4
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f


STUB = '''"""A stand-in for wandb that writes each call as a JSON line to $WANDB_STUB_LOG."""
import json, os
run = None
def _w(kind, **kw):
    with open(os.environ["WANDB_STUB_LOG"], "a") as f:
        f.write(json.dumps({"call": kind, **kw}, default=str) + "\\n")
def init(**kw):
    global run
    run = object()
    _w("init", **kw)
    return run
def log(data, step=None):
    _w("log", data=data, step=step)
def finish():
    _w("finish")
'''


def test_wandb_hook_logs_every_step_and_a_missing_package_is_refused(tmp_path, capsys,
                                                                      monkeypatch):
    import sys

    run = tmp_path / "run"
    argv = [*ARGS, "--train.steps", "3", "--train.checkpoint_every", "0",
            "--data.cache_dir", str(tmp_path / "cache"), "--run.dir", str(run),
            "--log.wandb", "asyncpp-test"]
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed: import fails
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wandb is not installed" in err, err
    assert not run.exists()
    monkeypatch.delitem(sys.modules, "wandb")
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "wandb.py").write_text(STUB)
    monkeypatch.syspath_prepend(str(tmp_path / "stub"))
    monkeypatch.setenv("WANDB_STUB_LOG", str(tmp_path / "calls.jsonl"))
    assert cli.main(argv) == 0
    calls = [json.loads(ln) for ln in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["call"] for c in calls] == ["init", "log", "log", "log", "finish"]
    assert calls[0]["project"] == "asyncpp-test" and calls[0]["name"] == "run"
    records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [c["step"] for c in calls[1:4]] == [r["step"] for r in records] == [1, 2, 3]
    for c, r in zip(calls[1:4], records):
        assert c["data"]["train_loss"] == r["train_loss"]
