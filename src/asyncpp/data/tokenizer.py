"""Tokenizers: a byte-level BPE trained offline (HF ``tokenizers``) and cached, or any HF
``tokenizer.json`` by path.

A document :math:`d` becomes ``encode(d) + [eos]``; the token stream of a corpus is the
concatenation over its documents, stored as uint16 when the vocabulary fits (< 65,536) and
uint32 otherwise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .cache import atomic_write, fingerprint

log = logging.getLogger(__name__)

EOS = "<|endoftext|>"
_EOS_CANDIDATES = (EOS, "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>", "[SEP]")
BPE_VERSION = "bytelevel-bpe-v1"


class Tokenizer:
    """A thin wrapper of ``tokenizers.Tokenizer``: vocabulary size, end-of-document id, batch
    encoding to one flat numpy array, and the file it can be saved as."""

    def __init__(self, tok, source: str) -> None:
        self.tok = tok
        self.source = source
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.eos_id = None
        for cand in _EOS_CANDIDATES:
            i = tok.token_to_id(cand)
            if i is not None:
                self.eos_id = i
                break

    @property
    def dtype(self):
        """``numpy.uint16`` when the vocabulary fits in 16 bits, else ``numpy.uint32``."""
        return np.uint16 if self.vocab_size <= 1 << 16 else np.uint32

    def fingerprint(self) -> str:
        """Stable identity of the vocabulary and merges (keys the token cache)."""
        return fingerprint(self.tok.to_str())

    def encode_documents(self, docs: Sequence[str], batch: int = 2048) -> np.ndarray:
        """Concatenated ids of ``docs``, each followed by the end-of-document id (if any)."""
        parts: list[np.ndarray] = []
        for i in range(0, len(docs), batch):
            for enc in self.tok.encode_batch(list(docs[i:i + batch]), add_special_tokens=False):
                ids = enc.ids
                if self.eos_id is not None:
                    ids = ids + [self.eos_id]
                parts.append(np.asarray(ids, dtype=self.dtype))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtype)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of token ids ``ids``."""
        return self.tok.decode([int(i) for i in ids])

    def save(self, path: str | os.PathLike) -> Path:
        """Write the tokenizer as a ``tokenizer.json`` at ``path`` (atomically)."""
        text = self.tok.to_str()
        return atomic_write(path, lambda f: f.write(text.encode()))


def bpe_cache_path(cache_root: str | os.PathLike, vocab_size: int, corpus_key: str) -> Path:
    """Cache file of the BPE with ``vocab_size`` entries trained on corpus ``corpus_key``."""
    key = fingerprint([BPE_VERSION, corpus_key, vocab_size])
    return Path(cache_root) / "tokenizers" / f"bpe-{vocab_size}-{key}.json"


def train_bpe(docs: Sequence[str], vocab_size: int, cache_root: Path, corpus_key: str) -> Tokenizer:
    """Byte-level BPE with ``vocab_size`` entries (256 bytes + merges + ``<|endoftext|>``),
    trained on ``docs`` and cached under ``cache_root/tokenizers`` keyed by corpus and size."""
    from tokenizers import Tokenizer as HFTokenizer

    if not (isinstance(vocab_size, int) and 258 <= vocab_size <= 1 << 20):
        raise ValueError(
            f"a byte-level BPE needs 258 <= vocab_size <= 1048576, got {vocab_size!r}; set "
            "data.vocab_size (or model.vocab_size)"
        )
    path = bpe_cache_path(cache_root, vocab_size, corpus_key)
    if path.is_file():
        try:
            return Tokenizer(HFTokenizer.from_file(str(path)), f"bpe:{path}")
        except Exception:  # a damaged cache entry is rebuilt, never trusted
            log.warning("ignoring unreadable cached tokenizer %s", path)
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    log.info("training a byte-level BPE (vocab %d) on %d documents", vocab_size, len(docs))
    tok.train_from_iterator(docs, trainer, length=len(docs))
    wrapped = Tokenizer(tok, f"bpe:{path}")
    wrapped.save(path)
    return wrapped


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Any HF tokenizer by path: a ``tokenizer.json`` file or a folder containing one."""
    from tokenizers import Tokenizer as HFTokenizer

    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise ValueError(
            f"data.tokenizer={str(path)!r} is neither a tokenizer.json file nor a folder holding "
            "one; download it (e.g. `hf download gpt2 tokenizer.json --local-dir tok/`) and "
            "pass its path, or use data.tokenizer='bpe'"
        )
    try:
        return Tokenizer(HFTokenizer.from_file(str(p)), str(p))
    except Exception as e:
        raise ValueError(
            f"data.tokenizer={str(path)!r} could not be read as a HF tokenizer.json ({e}); pass "
            "a file saved by `tokenizers`/`transformers`"
        ) from None
