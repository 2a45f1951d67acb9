"""The validation set: a fixed sample spread over every source of the held-out split in
proportion, the whole split at the end, per-source losses; on real corpora built by
asyncpp-corpus (the synthetic .debs of test_corpus) and through a real training run."""

import json
from collections import Counter

import numpy as np
import pytest
from test_corpus import fixture_sources  # noqa: F401  (the fixture)

from asyncpp.data import Source, load_data, validation_plan
from asyncpp.data import corpus_build as cb
from asyncpp.train.config import DataSection, from_dict, merge, parse_overrides, validate
from asyncpp.train.run import train

SOURCES = [Source("a", "prose", 0, 700), Source("b", "prose", 700, 1000),
           Source("c", "code", 1000, 3000)]


def test_sample_is_apportioned_spread_and_fixed():
    plan = validation_plan(SOURCES, batch_size=8, num_batches=10, multiple=2, seed=0)
    per = Counter(b.source for b in plan)
    # 10 batches over 700 / 300 / 2000 windows: largest remainder after one each
    assert per == {"a": 2, "b": 1, "c": 7}
    assert all(len(b.indices) == 8 for b in plan)
    for src in SOURCES:
        idx = sorted(j for b in plan if b.source == src.name for j in b.indices)
        n = len(idx)
        assert len(set(idx)) == n and src.lo <= idx[0] and idx[-1] < src.hi
        # one window per stratum of W/n windows: the sample reaches every part of the source
        edges = src.lo + np.arange(n + 1) * src.num_windows / n
        assert all(np.floor(edges[i]) <= j < edges[i + 1] for i, j in enumerate(idx))
    assert plan == validation_plan(SOURCES, 8, 10, multiple=2, seed=0)
    assert plan != validation_plan(SOURCES, 8, 10, multiple=2, seed=1)


def test_full_reads_every_window_but_a_microbatch_remainder():
    plan = validation_plan([Source("a", "prose", 0, 13), Source("b", "code", 13, 30)], 4, 1,
                           full=True, multiple=2)
    seen = [j for b in plan for j in b.indices]
    assert all(len(b.indices) % 2 == 0 for b in plan)
    assert len(seen) == len(set(seen))
    assert set(range(0, 12)) | set(range(13, 29)) == set(seen)  # 12 and 29 cut (odd tails)
    assert {b.source for b in plan if b.indices[0] < 13} == {"a"}
    with pytest.raises(ValueError, match="microbatches"):
        validation_plan(SOURCES, 5, 2, multiple=2)


def _corpus(tmp_path, fixture_sources):  # noqa: F811
    srcs, debs = fixture_sources
    out = tmp_path / "corpus"
    m = cb.build(out, srcs, debs, vocab=300, val_every=3, shard_tokens=2000)
    return out, m


def test_manifest_names_the_sources_of_the_validation_split(tmp_path, fixture_sources):  # noqa: F811
    out, m = _corpus(tmp_path, fixture_sources)
    cfg = DataSection(source="shards", path=str(out / "debdocs_train_*.bin"),
                      val_path=str(out / "debdocs_val_*.bin"),
                      tokenizer=str(out / "tokenizer.json"), seq_len=16)
    b = load_data(cfg, 300)
    names = [s.name for s in b.val_sources]
    assert names == [s["package"] for s in m["sources"] if s["val_tokens"]]
    assert b.val_sources[-1].hi == b.val.num_windows and b.val_sources[0].lo == 0
    # the code source's windows are Go files, the prose source's are not
    text = {s.name: b.tokenizer.decode(np.concatenate(
        [b.val.window(j) for j in range(s.lo, s.hi)]).tolist()) for s in b.val_sources}
    assert "package m" in text["code-b"] and "package m" not in text["docs-a"]
    # a manifest that does not describe the shard is refused, with the fix
    bad = json.loads((out / "manifest.json").read_text())
    bad["sources"][0]["val_tokens"] += 1
    (out / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="rebuild the corpus"):
        load_data(cfg, 300)


def test_a_run_reports_the_whole_split_and_each_source(tmp_path, fixture_sources):  # noqa: F811
    out, m = _corpus(tmp_path, fixture_sources)
    over = {"data.source": "shards", "data.path": str(out / "debdocs_train_*.bin"),
            "data.val_path": str(out / "debdocs_val_*.bin"),
            "data.tokenizer": str(out / "tokenizer.json"), "model.vocab_size": "300",
            "data.seq_len": "16", "train.steps": "3", "train.batch_size": "4",
            "train.eval_batches": "2", "pipeline.schedule": "2bw", "pipeline.stages": "2",
            "pipeline.microbatches": "2", "pipeline.simulate": "true",
            "run.dir": str(tmp_path / "run"), "log.progress": "false", "log.plot": "false",
            "log.tensorboard": "off"}
    cfg = from_dict(merge({}, parse_overrides(list(over.items()))))
    validate(cfg, world_size=None)
    res = train(cfg)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    by = summary["final_val_loss_by_source"]
    assert set(by) == {"docs-a", "code-b"} and summary["final_val_full_split"] is True
    b = load_data(cfg.data, 300)
    W = {s.name: s.num_windows for s in b.val_sources}
    # every window is read but at most one odd one per source (2 microbatches)
    assert sum(W.values()) - len(W) <= summary["final_val_windows"] <= sum(W.values())
    weighted = sum(W[k] * by[k] for k in by) / sum(W.values())
    assert res.final_val_loss == pytest.approx(weighted, rel=1e-12)
    assert summary["final_val_loss_sample"] is not None
    assert summary["data"]["tokenizer_sha256"] == m["tokenizer"]["sha256"]
    assert len(summary["data"]["manifest_sha256"]) == 64
    assert summary["data"]["corpus_id"] == cb.corpus_id(m)
