"""asyncpp-corpus on a small fixture: two synthetic .deb files (ar + data.tar.xz, as dpkg-deb
writes them) built here, never the pinned packages or the network."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from asyncpp.data import corpus_build as cb
from asyncpp.data import load_data
from asyncpp.data.sources import open_shard
from asyncpp.train.config import DataSection

WORDS = ("the pipeline stage sends its activations forward and receives gradients back while "
         "the optimizer applies the update of the previous step to the current weights").split()


def _ar_member(name: str, data: bytes) -> bytes:
    head = f"{name + '/':<16}{int(time.time()):<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n"
    assert len(head) == 60
    return head.encode() + data + (b"\n" if len(data) % 2 else b"")


def make_deb(path: Path, files: dict[str, bytes]) -> Path:
    """A minimal .deb: debian-binary, control.tar.xz, data.tar.xz holding ``files``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ctl = io.BytesIO()
    with tarfile.open(fileobj=ctl, mode="w:xz"):
        pass
    path.write_bytes(b"!<arch>\n" + _ar_member("debian-binary", b"2.0\n")
                     + _ar_member("control.tar.xz", ctl.getvalue())
                     + _ar_member("data.tar.xz", buf.getvalue()))
    return path


def _doc(seed: int, n: int = 120) -> bytes:
    rng = np.random.default_rng(seed)
    return (" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n)) + ".\n").encode()


@pytest.fixture
def fixture_sources(tmp_path):
    debs = tmp_path / "debs"
    debs.mkdir()
    doc_files = {f"usr/share/doc/a/_sources/p{i}.rst.txt": _doc(i) for i in range(30)}
    doc_files["usr/share/doc/a/_sources/dup.rst.txt"] = _doc(0)  # same bytes as p0
    doc_files["usr/share/doc/a/_sources/short.rst.txt"] = b"too short"
    doc_files["usr/share/doc/a/html/p0.html"] = b"<html>" + _doc(0) + b"</html>"  # not included
    code_files = {f"usr/share/go/src/m{i}.go": b"package m\n\n// " + _doc(100 + i)
                  for i in range(10)}
    code_files["usr/share/go/src/m0_test.go"] = _doc(200)  # excluded
    a = make_deb(debs / "docs-a_1.0-1_all.deb", doc_files)
    b = make_deb(debs / "code-b_1%3a2.0_all.deb", code_files)
    sha = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b)}
    srcs = (cb.DebSource("docs-a", "1.0-1", sha[a.name], "PD", "prose",
                         r"^usr/share/doc/a/_sources/.*\.rst\.txt$"),
            cb.DebSource("code-b", "1:2.0", sha[b.name], "BSD", "code",
                         r"^usr/share/go/src/.*\.go$", r"_test\.go$"))
    return srcs, debs


def test_build_writes_shards_manifest_and_verifies(tmp_path, fixture_sources):
    srcs, debs = fixture_sources
    out = tmp_path / "corpus"
    m = cb.build(out, srcs, debs, vocab=300, val_every=5, shard_tokens=2000)
    st = {s["package"]: s for s in m["sources"]}
    assert st["docs-a"]["files"] == 32 and st["docs-a"]["documents"] == 30
    assert st["docs-a"]["dropped_duplicate"] == 1 and st["docs-a"]["dropped_short"] == 1
    assert st["code-b"]["documents"] == 10  # the _test.go file is excluded
    assert st["docs-a"]["deb_sha256"] == srcs[0].sha256
    t = m["totals"]
    assert t["train_documents"] + t["val_documents"] == 40 and t["val_documents"] > 0
    assert t["prose_train_tokens"] + t["code_train_tokens"] == t["train_tokens"]
    # shards: one validation shard, training shards of at most 2000 tokens, readable by the
    # trainer's shard reader, with the counts and hashes of the manifest
    files = sorted(p.name for p in out.glob("debdocs_*.bin"))
    assert files[0] == "debdocs_train_000001.bin" and files[-1] == "debdocs_val_000000.bin"
    total = 0
    for s in m["shards"]:
        arr = open_shard(out / s["file"])
        assert len(arr) == s["tokens"] and arr.dtype == np.uint16
        assert int(arr.max()) < m["tokenizer"]["vocab_size"] <= 300
        if s["split"] == "train":
            assert s["tokens"] <= 2000
            total += s["tokens"]
    assert total == t["train_tokens"]
    assert cb.verify(out)["shards"] == m["shards"]
    assert json.loads((out / "manifest.json").read_text())["totals"] == t
    # the split is a function of the path only: validation documents never reach training
    val_paths = [p for p in (f"docs-a:usr/share/doc/a/_sources/p{i}.rst.txt" for i in range(30))
                 if cb.is_validation(p, 5)]
    assert len(val_paths) == st["docs-a"]["val_documents"]
    # the trainer reads it as configured by the manifest
    cfg = DataSection(source="shards", path=str(out / "debdocs_train_*.bin"),
                      val_path=str(out / "debdocs_val_*.bin"),
                      tokenizer=str(out / "tokenizer.json"), seq_len=16)
    bundle = load_data(cfg, m["tokenizer"]["vocab_size"])
    assert bundle.train.num_tokens == t["train_tokens"]
    assert bundle.val.num_tokens == t["val_tokens"]
    # rebuilding gives the same bytes (the corpus id names the data exactly)
    m2 = cb.build(tmp_path / "again", srcs, debs, vocab=300, val_every=5, shard_tokens=2000)
    assert [s["sha256"] for s in m2["shards"]] == [s["sha256"] for s in m["shards"]]
    assert cb.corpus_id(m2) == cb.corpus_id(m)


def test_verify_and_pins_name_the_problem(tmp_path, fixture_sources):
    srcs, debs = fixture_sources
    out = tmp_path / "corpus"
    cb.build(out, srcs, debs, vocab=300, val_every=5)
    shard = out / "debdocs_val_000000.bin"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="debdocs_val_000000.bin has sha256"):
        cb.verify(out)
    bad = (srcs[0].__class__(**{**srcs[0].__dict__, "sha256": "0" * 64}),)
    with pytest.raises(ValueError, match="the pinned docs-a 1.0-1 has 0000"):
        cb.build(tmp_path / "x", bad, debs, vocab=300)
    with pytest.raises(ValueError, match="apt-get download nope=1"):
        cb.build(tmp_path / "y", (cb.DebSource("nope", "1", "", "", "prose", "x"),), debs)


def test_cli_verify(tmp_path, fixture_sources, capsys):
    srcs, debs = fixture_sources
    out = tmp_path / "corpus"
    cb.build(out, srcs, debs, vocab=300, val_every=5)
    assert cb.main(["verify", str(out)]) == 0
    assert "verified" in capsys.readouterr().out
    assert cb.main(["verify", str(tmp_path / "none")]) == 2
    assert "manifest.json is missing" in capsys.readouterr().err


def test_default_sources_are_pinned():
    for s in cb.DEFAULT_SOURCES:
        assert len(s.sha256) == 64 and s.version and s.licence and s.kind in ("prose", "code")
    assert cb.DEFAULT_SOURCES[3].filename == "git-doc_1%3a2.39.5-0+deb12u3_all.deb"
