"""experiments/provenance.py on a real git repository: the commit at the start, the dirty flag
and the diff's hash, and the refusal of a dirty tree."""

import subprocess

import pytest

from asyncpp.study.ladder import provenance


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.org")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "init")
    return tmp_path


def test_clean_tree(repo):
    st = provenance.code_state(repo)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert st["commit_at_start"] == head and st["dirty"] is False
    assert st["diff_sha256"] is None
    (repo / "ignored").mkdir()
    (repo / "ignored" / "big.bin").write_bytes(b"data")  # ignored files do not count
    assert provenance.code_state(repo)["dirty"] is False
    provenance.require_clean(st, allow_dirty=False)


def test_modified_and_untracked_files_make_it_dirty(repo):
    (repo / "a.py").write_text("x = 2\n")
    st = provenance.code_state(repo)
    assert st["dirty"] and len(st["diff_sha256"]) == 64
    with pytest.raises(provenance.DirtyTree, match="--allow-dirty"):
        provenance.require_clean(st, allow_dirty=False)
    provenance.require_clean(st, allow_dirty=True)
    # another change, another hash; an untracked file changes it too
    (repo / "a.py").write_text("x = 3\n")
    h3 = provenance.code_state(repo)["diff_sha256"]
    assert h3 != st["diff_sha256"]
    (repo / "new.py").write_text("y = 1\n")
    st2 = provenance.code_state(repo)
    assert st2["diff_sha256"] != h3 and st2["untracked"] == ["new.py"]
    (repo / "new.py").write_text("y = 2\n")
    assert provenance.code_state(repo)["diff_sha256"] != st2["diff_sha256"]


def test_regime_counts_tokens_and_epochs():
    r = provenance.regime(steps=100, batch_size=16, seq_len=128, params=204_800,
                          train_windows=3_200)
    assert r == {"tokens": 204_800, "tokens_per_param": 1.0, "epochs": 0.5}
    assert provenance.package_versions(("torch", "no-such-package-xyz"))[
        "no-such-package-xyz"] is None
