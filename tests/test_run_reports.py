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
