"""Write pre-tokenized token shards for ``data.source = "shards"`` (the GPU configurations).

Text comes from local files (``.txt``/``.md``, ``.jsonl``, ``.parquet``: ``--files``) or is
streamed from a Hugging Face dataset (``--hf``, e.g. FineWeb-Edu; needs ``pip install
datasets``). It is tokenized with any Hugging Face ``tokenizer.json`` (SmolLM2's 49,152-token
tokenizer for the ``smollm-*`` shapes), each document followed by the end-of-text token, and
written in the modded-nanogpt/llm.c layout that ``asyncpp.data`` reads: a header of 256 int32
(magic 20240520 for uint16 tokens, 20240801 for uint32; version 1; token count) followed by the
tokens. The first shard is the validation shard (``<prefix>_val_000000.bin``), the others are
training shards (``<prefix>_train_000001.bin``, ...).

Examples::

    python book/howto/make_shards.py --hf HuggingFaceFW/fineweb-edu --hf-config sample-10BT \\
        --tokenizer tokenizer.json --out data/fineweb-edu --max-tokens 7_200_000_000
    python book/howto/make_shards.py --files 'my_corpus/*.txt' --tokenizer tokenizer.json \\
        --out data/mine --shard-tokens 10_000_000
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from asyncpp.data.sources import (
    HEADER_INTS,
    MAGIC_UINT16,
    MAGIC_UINT32,
    expand_paths,
    read_documents,
)
from asyncpp.data.tokenizer import load_tokenizer


def documents(args) -> Iterator[str]:
    """The documents, one string each, from local files or a streamed HF dataset."""
    if args.files:
        yield from read_documents(expand_paths(args.files, "--files"), args.text_field)
        return
    try:
        from datasets import load_dataset
    except ImportError:
        sys.exit("make_shards.py: --hf needs the `datasets` package: pip install datasets")
    stream = load_dataset(args.hf, args.hf_config or None, split=args.split, streaming=True)
    for row in stream:
        yield row[args.text_field]


def write_shard(path: Path, tokens: np.ndarray) -> None:
    """One shard: header (magic, version 1, token count) then the tokens."""
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[0] = MAGIC_UINT16 if tokens.dtype == np.uint16 else MAGIC_UINT32
    header[1] = 1
    header[2] = len(tokens)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--files", help="local text/jsonl/parquet files (a path, folder or glob)")
    src.add_argument("--hf", help="a Hugging Face dataset name, streamed")
    ap.add_argument("--hf-config", default="", help="its configuration (e.g. sample-10BT)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--text-field", default="text")
    ap.add_argument("--tokenizer", required=True, help="a tokenizer.json (or its folder)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--prefix", default="fineweb", help="shard file prefix (default fineweb)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000,
                    help="tokens per shard (default 100M)")
    ap.add_argument("--max-tokens", type=int, default=0, help="stop after this many (0 = all)")
    args = ap.parse_args(argv)

    tok = load_tokenizer(args.tokenizer)
    out = Path(args.out)
    buf: list[np.ndarray] = []
    held = total = 0
    index = 0

    def flush(final: bool) -> None:
        nonlocal buf, held, index
        data = np.concatenate(buf) if buf else np.zeros(0, dtype=tok.dtype)
        while len(data) >= args.shard_tokens or (final and len(data)):
            part, data = data[:args.shard_tokens], data[args.shard_tokens:]
            kind = "val" if index == 0 else "train"
            write_shard(out / f"{args.prefix}_{kind}_{index:06d}.bin", part)
            print(f"wrote {out / f'{args.prefix}_{kind}_{index:06d}.bin'} ({len(part):,} tokens)")
            index += 1
        buf, held = ([data] if len(data) else []), len(data)

    batch: list[str] = []
    for doc in documents(args):
        batch.append(doc)
        if len(batch) == 1024:
            ids = tok.encode_documents(batch)
            batch = []
            buf.append(ids)
            held += len(ids)
            total += len(ids)
            if held >= args.shard_tokens:
                flush(False)
            if args.max_tokens and total >= args.max_tokens:
                break
    if batch:
        ids = tok.encode_documents(batch)
        buf.append(ids)
        total += len(ids)
    flush(True)
    if index < 2:
        print("note: fewer than two shards (one validation, one training); lower --shard-tokens",
              file=sys.stderr)
    print(f"{total:,} tokens in {index} shard(s), vocabulary {tok.vocab_size} "
          f"(set --model.vocab_size if it differs from the model's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
