"""Data: the embedded corpus, a user's files / HF datasets / token shards, tokenizers, and
deterministic resumable sampling. The entry point is :func:`load_data`."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cache import atomic_write, cache_dir, file_digest, fingerprint
from .corpus import CORPUS_VERSION, kjv_documents, kjv_path
from .dataset import (
    BatchSampler,
    Source,
    TokenWindows,
    ValBatch,
    eval_batches,
    validation_plan,
    window_sources,
)
from .sources import expand_paths, files_key, hf_documents, open_shard, read_documents
from .tokenizer import Tokenizer, bpe_cache_path, load_tokenizer, train_bpe

log = logging.getLogger(__name__)

SOURCES = ("bible", "files", "hf", "shards")

__all__ = [
    "SOURCES",
    "BatchSampler",
    "DataBundle",
    "Source",
    "TokenWindows",
    "ValBatch",
    "Tokenizer",
    "atomic_write",
    "cache_dir",
    "eval_batches",
    "kjv_documents",
    "load_data",
    "load_tokenizer",
    "train_bpe",
    "validation_plan",
    "window_sources",
]


@dataclass
class DataBundle:
    """What training needs from the data: windows of the two splits and the tokenizer."""

    train: TokenWindows
    val: TokenWindows | None
    tokenizer: Tokenizer | None
    tokenizer_file: Path | None
    description: str
    # the validation split's sources (one "all" unless the shards' manifest names them)
    val_sources: list[Source] | None = None
    manifest: Path | None = None  # the corpus manifest the shards came with, if any
    warnings: tuple[str, ...] = ()  # one line each, shown to the user before training


def split_documents(docs: list[str], val_fraction: float) -> tuple[list[str], list[str]] | None:
    r"""Interleaved held-out split: with stride :math:`s = \mathrm{round}(1/f)`, documents
    :math:`s-1, 2s-1, \dots` are validation. ``None`` when there are fewer than 2s documents
    (then the caller holds out the tail :math:`\lceil f n\rceil` tokens instead)."""
    if val_fraction <= 0:
        return docs, []
    stride = max(2, round(1 / val_fraction))
    if len(docs) < 2 * stride:
        return None
    val = docs[stride - 1::stride]
    train = [d for i, d in enumerate(docs) if i % stride != stride - 1]
    return train, val


def tail_split(tokens: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Hold out the last :math:`\lceil f n\rceil` tokens."""
    if val_fraction <= 0:
        return tokens, tokens[:0]
    n_val = math.ceil(len(tokens) * val_fraction)
    return tokens[:-n_val], tokens[-n_val:]


def load_data(cfg, model_vocab_size: int) -> DataBundle:
    """Prepare the data described by ``cfg`` (the ``[data]`` config section) for a model with
    ``model_vocab_size`` embedding rows. Raises ``ValueError`` with a fix for any bad input.
    Tokenizers and token arrays are cached under :func:`~asyncpp.data.cache_dir`."""
    if cfg.source not in SOURCES:
        raise ValueError(f"data.source={cfg.source!r} is unknown; choose one of {SOURCES}")
    if cfg.source == "shards":
        return _load_shards(cfg, model_vocab_size)
    root = cache_dir(cfg.cache_dir or None)
    vocab = cfg.vocab_size or model_vocab_size

    # Identify the corpus without reading it (so cache hits skip the text entirely).
    if cfg.source == "bible":
        corpus_key = [CORPUS_VERSION, file_digest(kjv_path()), cfg.max_documents]
        desc = "embedded KJV Bible"
        get_docs = lambda: kjv_documents(cfg.max_documents)
    elif cfg.source == "files":
        files = expand_paths(cfg.path)
        corpus_key = ["files", files_key(files), cfg.text_field, cfg.max_documents]
        desc = f"{len(files)} file(s) at {cfg.path}"
        get_docs = lambda: read_documents(files, cfg.text_field, cfg.max_documents)
    else:
        if not cfg.hf_name:
            raise ValueError("data.source='hf' needs data.hf_name (e.g. 'roneneldan/TinyStories')")
        corpus_key = ["hf", cfg.hf_name, cfg.hf_config, cfg.hf_split, cfg.text_field,
                      cfg.max_documents]
        desc = f"HF dataset {cfg.hf_name}"
        get_docs = lambda: hf_documents(cfg.hf_name, cfg.hf_config, cfg.hf_split,
                                        cfg.text_field, cfg.max_documents)
    split_key = fingerprint([corpus_key, cfg.val_fraction])
    docs_cache: dict = {}

    def docs():
        if "docs" not in docs_cache:
            all_docs = get_docs()
            docs_cache["docs"] = all_docs
            docs_cache["split"] = split_documents(all_docs, cfg.val_fraction)
        return docs_cache

    if cfg.tokenizer == "bpe":
        tok = _cached_bpe(bpe_cache_path(root, vocab, split_key))
        if tok is None:
            d = docs()
            train_docs = d["split"][0] if d["split"] is not None else d["docs"]
            tok = train_bpe(train_docs, vocab, root, split_key)
    else:
        tok = load_tokenizer(cfg.tokenizer)
    if tok.vocab_size > model_vocab_size:
        raise ValueError(
            f"tokenizer {tok.source!r} has {tok.vocab_size} tokens but model.vocab_size is "
            f"{model_vocab_size}; set --model.vocab_size {tok.vocab_size} (or larger)"
        )

    tok_key = fingerprint([split_key, tok.fingerprint()])
    tdir = Path(root) / "tokens"
    train_path, val_path = tdir / f"{tok_key}.train.npy", tdir / f"{tok_key}.val.npy"
    if not (train_path.is_file() and val_path.is_file()):
        d = docs()
        if d["split"] is not None:
            train_tok = tok.encode_documents(d["split"][0])
            val_tok = tok.encode_documents(d["split"][1])
        else:
            train_tok, val_tok = tail_split(tok.encode_documents(d["docs"]), cfg.val_fraction)
        atomic_write(train_path, lambda f: np.save(f, train_tok))
        atomic_write(val_path, lambda f: np.save(f, val_tok))
    train_arr = np.load(train_path, mmap_mode="r")
    val_arr = np.load(val_path, mmap_mode="r")
    tok_file = Path(tok.source.removeprefix("bpe:"))
    bundle = _bundle([train_arr], [val_arr] if len(val_arr) else [], cfg.seq_len, tok,
                   tok_file if tok_file.is_file() else None,
                   f"{desc}: {len(train_arr):,} train / {len(val_arr):,} val tokens, "
                   f"tokenizer vocab {tok.vocab_size}")
    if tok.vocab_size < model_vocab_size:
        # a BPE stops merging when the corpus has no pair left to merge: those rows of the
        # embedding are never read, and their softmax mass is learned away
        bundle = dataclasses.replace(bundle, warnings=(
            f"warning: the tokenizer has {tok.vocab_size} tokens but model.vocab_size is "
            f"{model_vocab_size}; {model_vocab_size - tok.vocab_size} embedding rows will never "
            f"be used (set --model.vocab_size {tok.vocab_size}, or give the BPE more text)",))
    return bundle


def _cached_bpe(path: Path) -> Tokenizer | None:
    if not path.is_file():
        return None
    try:
        return Tokenizer(load_tokenizer(path).tok, f"bpe:{path}")
    except ValueError:
        return None


def _load_shards(cfg, model_vocab_size: int) -> DataBundle:
    train = [open_shard(f, cfg.shard_dtype) for f in expand_paths(cfg.path, "data.path")]
    if cfg.val_path:
        val = [open_shard(f, cfg.shard_dtype) for f in expand_paths(cfg.val_path, "data.val_path")]
    elif cfg.val_fraction > 0:
        last, held = tail_split(train[-1], cfg.val_fraction)
        train[-1], val = last, [held]
    else:
        val = []
    tok = load_tokenizer(cfg.tokenizer) if cfg.tokenizer not in ("bpe", "none", "") else None
    bundle = _bundle(train, val, cfg.seq_len, tok, Path(tok.source) if tok else None,
                     f"{len(train)} token shard(s) at {cfg.path}")
    if cfg.val_path and bundle.val is not None:
        files = expand_paths(cfg.val_path, "data.val_path")
        manifest = Path(files[0]).parent / "manifest.json"
        if manifest.is_file():
            bundle.manifest = manifest
            ranges = manifest_val_ranges(manifest, files, val)
            bundle.val_sources = window_sources(bundle.val, ranges)
    top = bundle.train.max_token()
    if top >= model_vocab_size:
        raise ValueError(
            f"the shards hold token id {top} but model.vocab_size is {model_vocab_size}; set "
            f"--model.vocab_size {top + 1} (or the tokenizer's size), or check data.shard_dtype"
        )
    bundle.description += f": {bundle.train.num_tokens:,} train tokens"
    return bundle


def _bundle(train, val, seq_len, tok, tok_file, desc) -> DataBundle:
    tw = TokenWindows(train, seq_len, "train")
    vw = TokenWindows(val, seq_len, "validation") if val and sum(map(len, val)) else None
    return DataBundle(tw, vw, tok, tok_file, desc,
                      val_sources=window_sources(vw, None) if vw is not None else None)


def manifest_val_ranges(manifest: Path, files: list[str], val: list) -> list | None:
    r"""Token ranges ``(package, kind, start, end)`` of the validation split from a corpus
    manifest (``asyncpp-corpus build``): its documents are written source by source in the
    manifest's order, each ending in ``eos``, so source k holds tokens
    :math:`[\sum_{i<k} v_i, \sum_{i\le k} v_i)` (:math:`v_i` its ``val_tokens``). ``None``
    when the files are not the manifest's one validation shard; a manifest whose counts do
    not fall on document ends is refused."""
    import json

    m = json.loads(manifest.read_text())
    shards = [sh["file"] for sh in m.get("shards", []) if sh.get("split") == "val"]
    if [Path(f).name for f in files] != shards or "sources" not in m:
        return None
    eos = m.get("tokenizer", {}).get("eos_id")
    arr, out, start = val[0], [], 0
    for src in m["sources"]:
        end = start + int(src.get("val_tokens", 0))
        if end > start:
            if eos is not None and int(arr[end - 1]) != eos:
                raise ValueError(f"{manifest}: source {src['package']!r} should end at token "
                                 f"{end} of the validation shard, but no document ends there; "
                                 "rebuild the corpus (asyncpp-corpus build)")
            out.append((src["package"], src.get("kind", src["package"]), start, end))
        start = end
    if start != len(arr):
        raise ValueError(f"{manifest}: its sources hold {start:,} validation tokens, the shard "
                         f"{len(arr):,}; rebuild the corpus (asyncpp-corpus build)")
    return out
