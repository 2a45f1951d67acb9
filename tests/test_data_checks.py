"""Data mistakes a user can make are refused with one line and exit 2 before anything is
written: ``data.path`` without a files/shards source, binary or non-UTF-8 files; folders are
read at any depth without dotfiles; a tokenizer smaller than the model's vocabulary is named;
files the run writes get the user's umask, not 0600."""

from __future__ import annotations

import os
import stat

import pytest

from asyncpp.data import load_data
from asyncpp.data.cache import atomic_write
from asyncpp.data.sources import expand_paths, read_documents
from asyncpp.train import cli
from asyncpp.train.config import DataSection

TEXT = ("The quick brown fox jumps over the lazy dog. " * 40 + "\n") * 3
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("asyncpp-cache")


def _refused(argv, capsys, tmp_path):
    run_dir = tmp_path / "run"
    code = cli.main([*argv, "--run.dir", str(run_dir), "--model.name", "tiny",
                     "--train.steps", "1", "--log.progress", "false"])
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if "error" in ln]
    assert code == 2, err
    assert len(errors) == 1 and "Traceback" not in err, err
    assert not run_dir.exists()
    return errors[0]


def test_data_path_without_a_files_source_is_refused(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text(TEXT)
    line = _refused(["--data.path", str(tmp_path / "mine.txt")], capsys, tmp_path)
    assert "data.source files" in line and "bible" in line


def test_folders_are_read_at_any_depth_without_dotfiles(tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (tmp_path / "a.txt").write_text("first")
    (tmp_path / "sub" / "deeper" / "b.md").write_text("second")
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (tmp_path / ".git" / "HEAD.txt").write_text("ref: refs/heads/main")
    files = expand_paths(str(tmp_path))
    assert [f.relative_to(tmp_path).as_posix() for f in files] == ["a.txt", "sub/deeper/b.md"]
    assert read_documents(files) == ["first", "second"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="at any depth; names starting with a dot"):
        expand_paths(str(tmp_path / "empty"))


@pytest.mark.parametrize("name, body, why", [
    ("program", ELF, "binary"),
    ("noise.txt", bytes((i * 167 + 13) % 256 for i in range(4096)), "binary"),
    ("latin1.txt", "café crème brûlée ".encode("latin-1") * 50, "not UTF-8"),
])
def test_binary_and_non_utf8_files_are_refused_by_content(tmp_path, capsys, cache, name, body,
                                                          why):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "good.txt").write_text(TEXT)
    (folder / name).write_bytes(body)
    line = _refused(["--data.source", "files", "--data.path", str(folder),
                     "--data.cache_dir", str(cache)], capsys, tmp_path)
    assert name in line and why in line


def test_a_tokenizer_smaller_than_the_model_is_named(tmp_path, cache):
    (tmp_path / "small.txt").write_text(TEXT)
    data = load_data(DataSection(source="files", path=str(tmp_path / "small.txt"), seq_len=8,
                                 cache_dir=str(cache)), 2048)
    assert data.tokenizer.vocab_size < 2048
    assert len(data.warnings) == 1
    assert f"tokenizer has {data.tokenizer.vocab_size} tokens" in data.warnings[0]
    assert "model.vocab_size is 2048" in data.warnings[0]
    exact = load_data(DataSection(source="files", path=str(tmp_path / "small.txt"), seq_len=8,
                                  cache_dir=str(cache)), data.tokenizer.vocab_size)
    assert exact.warnings == ()


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_written_files_follow_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        path = atomic_write(tmp_path / "f.bin", lambda f: f.write(b"x"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
