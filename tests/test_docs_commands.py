"""Every shell command the README and the how-to pages document, run as written.

The ``bash`` blocks of ``README.md`` and ``book/howto/*.md`` are extracted and each command is
classified by :func:`plan`: cheap ones run exactly as written, training ones run as written
plus a few overrides that only shorten them (``--train.steps 2`` …) and send their run folder
to a temporary directory, commands that need a GPU, a second machine or the network are
checked as far as this machine allows (``--print-config``, ``make -n``, the extras named
exist). A command that fails, or a documented command no rule knows, fails the test — so a
page cannot document a command that does not work.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "book" / "howto").glob("*.md"))]
# Only shorten a run: 2 steps, small batches, evaluation at every step.
CHEAP = ("--train.steps 2 --train.batch_size 2 --train.eval_every 1 --train.eval_batches 1 "
         "--run.threads 1")


def shell_commands(path: Path) -> list[str]:
    """The commands of the ``bash`` blocks of ``path``: comments dropped, continuation lines
    joined."""
    out = []
    text = path.read_text(encoding="utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


COMMANDS = [(p.relative_to(ROOT).as_posix(), c) for p in DOCS for c in shell_commands(p)]


def plan(cmd: str) -> tuple[str, str]:
    """``(kind, reason)`` of a documented command; kind ``None`` for an unknown command."""
    rules = [
        (r"^make (demo|compare)\b", "make-run", "runs, shortened"),
        (r"^make (setup|test|book|verify)\b", "make-dry", "make -n: too long to run here"),
        (r"^(\.venv/bin/)?asyncpp-schedule\b", "run", "cheap"),
        (r"^(\.venv/bin/)?asyncpp-plot\b", "plot", "plots the runs of make compare"),
        (r"^(\.venv/bin/)?asyncpp-(export|eval) runs/byom\b", "on-byom",
         "reads the bring-your-own-model run"),
        (r"^(\.venv/bin/)?asyncpp-(export|eval)\b", "on-run", "reads a run of make compare"),
        (r"^(\.venv/bin/)?asyncpp-train\b.*configs/(smollm|moe)", "print-config", "needs a GPU"),
        (r"^(\.venv/bin/)?asyncpp-train\b", "train", "runs, shortened"),
        (r"torchrun\b.*--nnodes=2", "print-config", "needs a second machine"),
        (r"torchrun\b.*configs/(smollm|moe)", "print-config", "needs GPUs"),
        (r"torchrun\b.*--nproc-per-node=2\b", "torchrun", "runs 2 ranks (gloo), shortened"),
        (r"^(\.venv/bin/)?asyncpp-study (plan|status|power) ", "run",
         "reads the study, runs nothing"),
        (r"^(\.venv/bin/)?asyncpp-study (run|report|reproduce) configs/study-tiny\.toml",
         "study", "runs the tiny study into a temporary folder"),
        (r"^(\.venv/bin/)?python -m theory\b", "run", "checks every proof step"),
        (r"^(HYPOTHESIS_PROFILE=\w+ )?(\.venv/bin/)?pytest verify/", "collect",
         "is the verification suite itself: collected only"),
        (r"^(\.venv/bin/)?python -c ", "run", "cheap"),
        (r"^python book/howto/make_shards\.py --files", "shards", "runs on a small corpus"),
        (r"^python book/howto/make_shards\.py --hf", "skip", "streams FineWeb-Edu: network"),
        (r"^pip install -e \"\.\[(\w+)\]\"", "extra", "network: the extra must exist"),
        (r"^pip install (torch|datasets)$", "skip", "network"),
        (r"^(\.venv/bin/)?jupyter-book build\b", "skip", "= make book"),
        (r"^xdg-open\b", "skip", "opens a browser"),
    ]
    for pattern, kind, reason in rules:
        if re.search(pattern, cmd):
            return kind, reason
    return None, "no rule"


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run(cmd: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    res = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=_env(), capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, (f"documented command failed ({res.returncode}): {cmd}\n"
                                 f"--- stdout\n{res.stdout[-3000:]}\n--- stderr\n"
                                 f"{res.stderr[-3000:]}")
    return res


def _run_dir(cmd: str, tmp: Path) -> str:
    m = re.search(r"--run\.name\s+(\S+)", cmd)
    return f"--run.dir {tmp / (m.group(1) if m else 'run')}"


def _ids(kind: str) -> list:
    return [pytest.param(f, c, id=f"{f}: {c[:60]}") for f, c in COMMANDS if plan(c)[0] == kind]


def test_docs_have_commands_and_every_one_is_known():
    assert len(COMMANDS) >= 20, COMMANDS
    unknown = [(f, c) for f, c in COMMANDS if plan(c)[0] is None]
    assert not unknown, f"documented commands no test knows how to check: {unknown}"


def test_plan_rejects_an_unknown_command():
    """The check above can fail: a made-up command has no rule."""
    assert plan("asyncpp-frobnicate --now")[0] is None


@pytest.mark.parametrize("doc,cmd", _ids("run"))
def test_cheap_command_runs_as_written(doc, cmd):
    _run(cmd, ROOT)


@pytest.mark.parametrize("doc,cmd", _ids("train"))
def test_train_command_runs(doc, cmd, tmp_path):
    _run(f"{cmd} {CHEAP} {_run_dir(cmd, tmp_path)}", ROOT)


@pytest.mark.multiprocess
@pytest.mark.parametrize("doc,cmd", _ids("torchrun"))
def test_torchrun_command_runs(doc, cmd, tmp_path):
    _run(f"{cmd} {CHEAP} {_run_dir(cmd, tmp_path)}", ROOT)


@pytest.fixture(scope="module")
def study_out(tmp_path_factory):
    """The folder the documented tiny study runs and reports into."""
    return tmp_path_factory.mktemp("study")


@pytest.mark.parametrize("doc,cmd", _ids("study"))
def test_study_command_runs(doc, cmd, study_out):
    reads = " report " in f" {cmd} " or " reproduce " in f" {cmd} "
    if reads and not (study_out / "results").exists():
        _run(f"asyncpp-study run configs/study-tiny.toml --out {study_out}", ROOT, timeout=1500)
    # a result the documentation names under the default folder lies in the test's folder
    res = _run(f"{cmd.replace('runs/study-tiny/', f'{study_out}/')} --out {study_out}", ROOT,
               timeout=1500)
    if " report " in f" {cmd} ":
        assert (study_out / "tables.md").is_file() and (study_out / "report.json").is_file()
    if " reproduce " in f" {cmd} ":
        assert ": bit for bit" in res.stdout, res.stdout


@pytest.mark.parametrize("doc,cmd", _ids("print-config"))
def test_gpu_or_multinode_command_resolves(doc, cmd):
    """What this machine can check of a GPU / multi-node command: its configuration and
    overrides resolve and validate."""
    args = cmd.split("asyncpp.train.cli", 1)[1] if "asyncpp.train.cli" in cmd else \
        cmd.split("asyncpp-train", 1)[1]
    res = _run(f"python -m asyncpp.train.cli {args} --print-config", ROOT)
    assert "[model]" in res.stdout


@pytest.mark.parametrize("doc,cmd", _ids("make-dry"))
def test_make_target_exists(doc, cmd):
    res = _run(cmd.replace("make ", "make -n ", 1), ROOT)
    if "TORCH_SPEC=" in cmd:  # another torch build really reinstalls torch
        assert "pip uninstall -y -q torch" in res.stdout, res.stdout
        index = re.search(r"TORCH_INDEX=(\S+)", cmd)
        if index:
            assert f"--index-url {index.group(1)}" in res.stdout, res.stdout


def test_make_setup_default_does_not_reinstall():
    res = _run("make -n setup", ROOT)
    assert "pip uninstall" not in res.stdout, res.stdout


@pytest.fixture(scope="module")
def compare_runs(tmp_path_factory):
    """``make compare`` (shortened) into a temporary folder: the three runs and the plot."""
    runs = tmp_path_factory.mktemp("compare") / "runs"
    _run(f'make compare RUNS={runs} COMPARE_ARGS="{CHEAP}"', ROOT, timeout=1200)
    return runs


@pytest.mark.parametrize("doc,cmd", _ids("make-run"))
def test_make_run_target(doc, cmd, tmp_path, compare_runs):
    if cmd.startswith("make compare"):
        for name in ("muon-sync", "muon-2bw", "muon-2bw-ef"):
            assert (compare_runs / name / "metrics.jsonl").is_file(), name
        assert (compare_runs / "compare.png").stat().st_size > 0
        return
    _run(f'{cmd} DEMO_ARGS="{CHEAP} --run.dir {tmp_path / "demo"}"', ROOT)
    assert (tmp_path / "demo" / "metrics.jsonl").is_file()


def test_make_compare_from_a_fresh_clone(tmp_path):
    """``make compare`` in a fresh clone of the committed repository (sharing this checkout's
    environment: ``VENV`` and an up-to-date ``STAMP`` stand in for ``make setup``)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True,
                   capture_output=True)
    stamp = tmp_path / "stamp"
    stamp.touch()
    runs = tmp_path / "runs"
    _run(f'make compare VENV={VENV_BIN.parent} STAMP={stamp} RUNS={runs} COMPARE_ARGS="{CHEAP}"',
         clone, timeout=1200)
    assert (runs / "compare.png").stat().st_size > 0
    assert not (clone / "runs").exists() and not (clone / "loss.png").exists()


@pytest.mark.parametrize("doc,cmd", _ids("plot"))
def test_plot_command_on_the_compare_runs(doc, cmd, compare_runs, tmp_path):
    """The plotting example uses exactly the runs ``make compare`` makes."""
    (tmp_path / "runs").symlink_to(compare_runs, target_is_directory=True)
    _run(cmd, tmp_path)
    out = re.search(r"-o\s+(\S+)", cmd)
    assert (tmp_path / (out.group(1) if out else "loss.png")).is_file()


@pytest.mark.parametrize("doc,cmd", _ids("on-run"))
def test_export_and_eval_commands_on_the_compare_runs(doc, cmd, compare_runs, tmp_path):
    """``asyncpp-export`` / ``asyncpp-eval`` as written, on the runs ``make compare`` makes (and
    the book's pages as other data)."""
    _export_or_eval(cmd, compare_runs, tmp_path, "model.safetensors")


def _export_or_eval(cmd: str, runs: Path, tmp_path: Path, *written: str) -> None:
    """Run an ``asyncpp-export`` / ``asyncpp-eval`` command as written beside ``runs`` and the
    book's pages: eval prints one ``val loss`` line, export writes ``written``."""
    (tmp_path / "runs").symlink_to(runs, target_is_directory=True)
    (tmp_path / "book").symlink_to(ROOT / "book", target_is_directory=True)
    (tmp_path / ".venv").symlink_to(VENV_BIN.parent, target_is_directory=True)  # .venv/bin/…
    res = _run(cmd, tmp_path)
    if "asyncpp-eval" in cmd:
        assert re.fullmatch(r"val loss \d+\.\d+\n", res.stdout), res.stdout
    else:
        out = tmp_path / re.search(r"--out\s+(\S+)", cmd).group(1)
        assert all((out / name).is_file() for name in written), sorted(out.iterdir())
        shutil.rmtree(out)  # the next run of this test writes it again


@pytest.fixture(scope="module")
def byom_runs(tmp_path_factory):
    """``runs/byom`` as the how-to's torchrun command makes it (shortened)."""
    root = tmp_path_factory.mktemp("byom")
    cmd = next(c for _, c in COMMANDS if plan(c)[0] == "torchrun" and "configs/byom.toml" in c
               and "--run.name byom " in c + " ")
    _run(f"{cmd} {CHEAP} --run.dir {root / 'runs' / 'byom'}", ROOT)
    return root / "runs"


@pytest.mark.multiprocess
@pytest.mark.parametrize("doc,cmd", _ids("on-byom"))
def test_export_and_eval_commands_on_the_byom_run(doc, cmd, byom_runs, tmp_path):
    """The how-to's ``asyncpp-export`` / ``asyncpp-eval`` on the run its torchrun command
    makes: a Hugging Face folder, and one ``val loss`` line."""
    _export_or_eval(cmd, byom_runs, tmp_path, "config.json", "model.safetensors",
                    "tokenizer.json")


@pytest.mark.parametrize("doc,cmd", _ids("collect"))
def test_verify_suite_is_collected(doc, cmd):
    res = _run("pytest --collect-only -q -p no:cacheprovider verify/", ROOT, timeout=600)
    assert "test" in res.stdout


@pytest.mark.parametrize("doc,cmd", _ids("extra"))
def test_pip_extra_exists(doc, cmd):
    extra = re.search(r"\[(\w+)\]", cmd).group(1)
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    assert re.search(rf"^{extra}\s*=", section, re.M), f"no extra {extra!r} in pyproject.toml"


@pytest.mark.parametrize("doc,cmd", _ids("shards"))
def test_make_shards_then_train_on_them(doc, cmd, tmp_path):
    """The "your own text" shard command, as written, on a small corpus with a BPE
    tokenizer.json; then two training steps read the shards it wrote."""
    from asyncpp.data.corpus import kjv_documents
    from asyncpp.data.tokenizer import train_bpe

    corpus = tmp_path / "my_corpus"
    corpus.mkdir()
    docs = kjv_documents(120)
    for i, d in enumerate(docs):
        (corpus / f"{i:03d}.txt").write_text(d, encoding="utf-8")
    train_bpe(docs, 512, tmp_path / "cache", "docs-test").save(tmp_path / "tokenizer.json")
    (tmp_path / "book").symlink_to(ROOT / "book", target_is_directory=True)
    _run(cmd, tmp_path)
    out = Path(shlex.split(cmd)[shlex.split(cmd).index("--out") + 1])
    prefix = shlex.split(cmd)[shlex.split(cmd).index("--prefix") + 1]
    assert sorted(p.name for p in (tmp_path / out).glob("*_val_*.bin")) == [
        f"{prefix}_val_000000.bin"]
    _run(f"asyncpp-train --model.name tiny --data.source shards "
         f"--data.path '{tmp_path / out}/{prefix}_train_*.bin' "
         f"--data.val_path '{tmp_path / out}/{prefix}_val_*.bin' "
         f"--data.tokenizer {tmp_path / 'tokenizer.json'} --model.vocab_size 512 "
         f"--data.seq_len 32 {CHEAP} --run.dir {tmp_path / 'run'}", tmp_path)
