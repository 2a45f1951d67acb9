"""Data: the embedded corpus, BPE training and caching, a user's files and shards, the
validation split, and deterministic resumable sampling."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch

from asyncpp.data import BatchSampler, TokenWindows, eval_batches, kjv_documents, load_data
from asyncpp.data.cache import atomic_write
from asyncpp.data.sources import MAGIC_UINT16, MAGIC_UINT32
from asyncpp.train.config import DataSection


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("asyncpp-cache")


def _data(cache, **kw):
    base = dict(source="bible", max_documents=60, seq_len=32, cache_dir=str(cache))
    base.update(kw)
    return DataSection(**base)


def test_embedded_corpus_is_the_kjv():
    docs = kjv_documents()
    assert len(docs) == 1189  # chapters
    assert docs[0].startswith("Genesis 1\nIn the beginning God created the heaven and the earth.")
    assert docs[-1].startswith("Revelation 22\n")
    assert 4.0e6 < sum(map(len, docs)) < 4.5e6
    assert kjv_documents(3) == docs[:3]


def test_bpe_is_trained_once_and_cached(cache):
    b = load_data(_data(cache), 512)
    assert b.tokenizer.vocab_size == 512 and b.tokenizer.eos_id is not None
    tok_files = list((cache / "tokenizers").glob("*.json"))
    assert len(tok_files) == 1 and b.tokenizer_file == tok_files[0]
    mtimes = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    b2 = load_data(_data(cache), 512)  # a cache hit writes nothing
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == mtimes
    np.testing.assert_array_equal(b.train.arrays[0], b2.train.arrays[0])
    # the cache is keyed by vocabulary size and corpus
    load_data(_data(cache, vocab_size=300), 512)
    assert len(list((cache / "tokenizers").glob("*.json"))) == 2
    assert not list(cache.rglob("*.tmp"))
    text = b.tokenizer.decode(b.train.window(0)[:20])
    assert text.startswith("Genesis 1\nIn the beginning")


def test_validation_split_is_held_out(cache):
    b = load_data(_data(cache, val_fraction=0.1), 512)
    docs = kjv_documents(60)
    # every 10th chapter (val_fraction 0.1) is validation: Genesis 10, 20, ...
    val_text = b.tokenizer.decode(b.val.arrays[0][:30])
    assert val_text.startswith("Genesis 10\n")
    assert "Genesis 20\n" in b.tokenizer.decode(b.val.arrays[0])
    assert "Genesis 10\n" not in b.tokenizer.decode(b.train.arrays[0])
    assert 0.08 < b.val.num_tokens / (b.train.num_tokens + b.val.num_tokens) < 0.12
    # too few documents for an interleaved split: the tail is held out
    tail = load_data(_data(cache), 512)
    assert docs[-1].split("\n")[1][:20] in tail.tokenizer.decode(tail.val.arrays[0])
    with pytest.raises(ValueError, match="too few"):
        load_data(_data(cache, seq_len=100_000), 512)


def test_sampler_is_deterministic_and_resumable(cache):
    w = load_data(_data(cache), 512).train
    a = BatchSampler(w, 4, seed=3)
    b = BatchSampler(w, 4, seed=3)
    for _ in range(3):
        xa, ya = a.next_batch()
        xb, yb = b.next_batch()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert torch.equal(xa[:, 1:], ya[:, :-1])  # targets are inputs shifted by one
    state = a.state_dict()
    assert set(state) >= {"seed", "epoch", "index"}
    cont = [a.next_batch()[0] for _ in range(4)]
    c = BatchSampler(w, 4, seed=0)
    c.load_state_dict(json.loads(json.dumps(state)))  # a small plain dict
    assert all(torch.equal(x, c.next_batch()[0]) for x in cont)
    other = BatchSampler(w, 4, seed=4).next_batch()[0]
    assert not torch.equal(other, BatchSampler(w, 4, seed=3).next_batch()[0])
    with pytest.raises(ValueError, match="data position"):
        BatchSampler(w, 8).load_state_dict(state)


def test_an_epoch_visits_every_window_once():
    arrays = [np.arange(0, 41, dtype=np.uint16), np.arange(100, 131, dtype=np.uint16)]
    w = TokenWindows(arrays, seq_len=5)
    assert w.num_windows == 8 + 6
    s = BatchSampler(w, 2, seed=1)
    seen = []
    for _ in range(7):
        x, _ = s.next_batch()
        seen += [int(r[0]) for r in x]
    assert sorted(seen) == sorted([5 * i for i in range(8)] + [100 + 5 * i for i in range(6)])
    assert s.state_dict()["epoch"] == 1 and s.state_dict()["index"] == 0
    batches = list(eval_batches(w, 4, 2))
    assert [b[0].shape[0] for b in batches] == [4, 4]
    assert int(batches[0][0][0, 0]) == 0


def test_local_text_jsonl_and_parquet_files(tmp_path, cache):
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    (tmp_path / "a.txt").write_text(" ".join(rng.choice(words, 3000)))
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"body": f"doc {i} " * 50})
                                                for i in range(30)))
    b = load_data(_data(cache, source="files", path=str(tmp_path / "a.txt"), vocab_size=300), 512)
    assert b.train.num_tokens > 100 and b.val is not None  # tail split of a single document
    b = load_data(_data(cache, source="files", path=str(tmp_path / "b.jsonl"),
                        text_field="body", vocab_size=300), 512)
    assert "doc" in b.tokenizer.decode(b.train.window(0))
    with pytest.raises(ValueError, match="no field 'text'"):
        load_data(_data(cache, source="files", path=str(tmp_path / "b.jsonl")), 512)
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [f"row {i} " * 40 for i in range(20)]}),
                   tmp_path / "c.parquet")
    b = load_data(_data(cache, source="files", path=str(tmp_path / "c.parquet"),
                        vocab_size=300), 512)
    assert "row" in b.tokenizer.decode(b.train.window(0))


def test_hf_tokenizer_by_path(tmp_path, cache):
    b = load_data(_data(cache), 512)
    b.tokenizer.save(tmp_path / "tok" / "tokenizer.json")
    b2 = load_data(_data(cache, tokenizer=str(tmp_path / "tok")), 512)
    np.testing.assert_array_equal(b.train.arrays[0], b2.train.arrays[0])
    with pytest.raises(ValueError, match="model.vocab_size 512"):
        load_data(_data(cache, tokenizer=str(tmp_path / "tok")), 400)
    with pytest.raises(ValueError, match="tokenizer.json"):
        load_data(_data(cache, tokenizer=str(tmp_path / "missing")), 512)


def _write_header_shard(path, tokens, magic):
    dtype = np.uint16 if magic == MAGIC_UINT16 else np.uint32
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (magic, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=dtype).tobytes())


def test_pretokenized_shards(tmp_path, cache):
    toks = np.arange(5000) % 300
    np.asarray(toks, dtype=np.uint16).tofile(tmp_path / "raw_000.bin")  # nanoGPT layout
    _write_header_shard(tmp_path / "hdr_000.bin", toks, MAGIC_UINT16)  # modded-nanogpt
    _write_header_shard(tmp_path / "big_000.bin", toks + 70000, MAGIC_UINT32)
    np.asarray(toks, dtype=np.uint32).tofile(tmp_path / "raw32_000.bin")
    cfg = _data(cache, source="shards", path=str(tmp_path / "raw_*.bin"))
    raw = load_data(cfg, 512)
    hdr = load_data(dataclasses.replace(cfg, path=str(tmp_path / "hdr_*.bin")), 512)
    np.testing.assert_array_equal(raw.train.window(3), hdr.train.window(3))
    assert raw.val is not None and raw.train.num_tokens + raw.val.num_tokens == 5000
    r32 = load_data(dataclasses.replace(cfg, path=str(tmp_path / "raw32_*.bin"),
                                        shard_dtype="uint32"), 512)
    np.testing.assert_array_equal(r32.train.window(3), raw.train.window(3))
    big = load_data(dataclasses.replace(cfg, path=str(tmp_path / "big_*.bin")), 80000)
    assert big.train.window(0)[0] == 70000
    with pytest.raises(ValueError, match="model.vocab_size 70300"):
        load_data(dataclasses.replace(cfg, path=str(tmp_path / "big_*.bin")), 512)
    # truncated header shard, empty file, no match
    with open(tmp_path / "hdr_000.bin", "r+b") as f:
        f.truncate(256 * 4 + 100)
    with pytest.raises(ValueError, match="truncated"):
        load_data(dataclasses.replace(cfg, path=str(tmp_path / "hdr_*.bin")), 512)
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="is empty"):
        load_data(dataclasses.replace(cfg, path=str(tmp_path / "empty.bin")), 512)
    with pytest.raises(ValueError, match="matches no files"):
        load_data(dataclasses.replace(cfg, path=str(tmp_path / "nothing_*.bin")), 512)


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    p = tmp_path / "x.bin"
    atomic_write(p, lambda f: f.write(b"old"))

    def boom(f):
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write(p, boom)
    assert p.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["x.bin"]


def test_hf_dataset_errors_are_clear(cache):
    try:
        import datasets  # noqa: F401
        match = "could not load HF dataset"
    except ImportError:
        match = "needs the 'datasets' package"
    with pytest.raises(ValueError, match=match):
        load_data(_data(cache, source="hf", hf_name="no-such-user/no-such-dataset-xyz"), 512)
