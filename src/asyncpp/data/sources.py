"""Reading a user's data: local text / jsonl / parquet files, HF datasets by name, and
pre-tokenized shard files.

Shard layouts (``.bin``):

* nanoGPT: raw token ids, no header (``uint16``, or ``uint32`` via ``data.shard_dtype``);
* modded-nanogpt / llm.c: a header of 256 int32 — magic ``20240520`` (uint16 tokens) or
  ``20240801`` (uint32 tokens), version, token count — followed by the tokens.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import numpy as np

from .cache import file_digest

TEXT_SUFFIXES = (".txt", ".text", ".md")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
HEADER_INTS = 256
MAGIC_UINT16 = 20240520
MAGIC_UINT32 = 20240801


def expand_paths(spec: str, what: str = "data.path", suffixes: tuple[str, ...] | None = None
                 ) -> list[Path]:
    """Files named by ``spec``: a file, a folder (its files with ``suffixes`` at any depth,
    sorted; names starting with a dot, such as ``.DS_Store`` or ``.git/``, are skipped), or a
    glob pattern (sorted). Raises ``ValueError`` if nothing matches."""
    if not spec:
        raise ValueError(f"{what} is empty; set it to a file, a folder or a glob pattern")
    p = Path(spec).expanduser()
    if p.is_file():
        files = [p]
    elif p.is_dir():
        files = sorted(f for f in p.rglob("*")
                       if f.is_file() and not _hidden(f.relative_to(p))
                       and (suffixes is None or f.suffix.lower() in suffixes))
    else:
        files = sorted(Path(f) for f in glob.glob(os.path.expanduser(spec)) if Path(f).is_file())
    if not files:
        hint = f" with suffix {'/'.join(suffixes)}" if suffixes else ""
        where = " (at any depth; names starting with a dot are skipped)" if p.is_dir() else ""
        raise ValueError(f"{what}={spec!r} matches no files{hint}{where}; check the path")
    for f in files:
        if f.stat().st_size == 0:
            raise ValueError(f"data file {str(f)!r} is empty; remove it or point {what} elsewhere")
    return files


def read_documents(files: list[Path], text_field: str = "text", max_documents: int = 0
                   ) -> list[str]:
    """Documents from text files (one document per file), jsonl (one per line, field
    ``text_field``) and parquet (one per row, column ``text_field``; needs ``pyarrow``)."""
    docs: list[str] = []
    for f in files:
        suffix = f.suffix.lower()
        if suffix in JSONL_SUFFIXES:
            docs.extend(_read_jsonl(f, text_field))
        elif suffix in PARQUET_SUFFIXES:
            docs.extend(_read_parquet(f, text_field))
        elif suffix in TEXT_SUFFIXES or suffix == "":
            docs.append(read_text_file(f))
        else:
            raise ValueError(
                f"data file {str(f)!r} has an unsupported suffix {suffix!r}; use .txt/.md "
                "(text), .jsonl (one JSON object per line) or .parquet"
            )
        if max_documents and len(docs) >= max_documents:
            return docs[:max_documents]
    docs = [d for d in docs if d]
    if not docs:
        raise ValueError(f"no text found in {', '.join(map(str, files))} (field {text_field!r})")
    return docs


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def read_text_file(path: Path) -> str:
    """The text of a UTF-8 file; ``ValueError`` naming the file for a binary one (a NUL byte:
    executables, images, compressed data) or one that is not valid UTF-8 — decoding such a
    file with replacement characters would train on noise."""
    raw = path.read_bytes()
    if b"\x00" in raw:
        raise ValueError(f"data file {str(path)!r} is binary (it holds NUL bytes), not text; "
                         "remove it or point data.path elsewhere")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"data file {str(path)!r} is not UTF-8 text (byte {e.start}: "
                         f"{raw[e.start:e.start + 1]!r}); convert it to UTF-8 or remove it"
                         ) from None


def _read_jsonl(path: Path, field: str) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n} is not valid JSON ({e.msg}); one object per line "
                                 "is expected") from None
            if not isinstance(rec, dict) or field not in rec:
                raise ValueError(f"{path}:{n} has no field {field!r}; set data.text_field to "
                                 "the key holding the text")
            out.append(str(rec[field]))
    return out


def _read_parquet(path: Path, field: str) -> list[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"reading {str(path)!r} needs pyarrow; `pip install pyarrow`, or "
                         "convert the file to jsonl") from None
    table = pq.read_table(path)
    if field not in table.column_names:
        raise ValueError(f"{str(path)!r} has no column {field!r} (columns: "
                         f"{', '.join(table.column_names)}); set data.text_field")
    return [str(x) for x in table.column(field).to_pylist() if x is not None]


def files_key(files: list[Path]) -> list[str]:
    """Content digests of ``files`` (the cache key of their tokenization)."""
    return [file_digest(f) for f in files]


def hf_documents(name: str, config: str, split: str, text_field: str, max_documents: int
                 ) -> list[str]:
    """Documents of a HF dataset by name (needs the ``datasets`` package and network access,
    or the dataset already in the HF cache)."""
    try:
        import datasets
    except ImportError:
        raise ValueError(f"data.hf_name={name!r} needs the 'datasets' package; `pip install "
                         "datasets`, or download the data and use data.source='files'") from None
    split_spec = f"{split}[:{max_documents}]" if max_documents else split
    try:
        ds = datasets.load_dataset(name, config or None, split=split_spec)
    except Exception as e:  # offline, unknown name, missing split...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"could not load HF dataset {name!r} (config {config!r}, split "
                         f"{split_spec!r}): {first}; check the name and that you are online"
                         ) from None
    if text_field not in ds.column_names:
        raise ValueError(f"HF dataset {name!r} has no column {text_field!r} (columns: "
                         f"{', '.join(ds.column_names)}); set data.text_field")
    return [str(x) for x in ds[text_field] if x]


def open_shard(path: Path, dtype: str = "auto") -> np.ndarray:
    """Memory-map a token shard (layouts in the module docstring)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = np.frombuffer(f.read(min(size, HEADER_INTS * 4)), dtype=np.int32)
    if len(head) >= 3 and head[0] in (MAGIC_UINT16, MAGIC_UINT32):
        tok_dtype = np.uint16 if head[0] == MAGIC_UINT16 else np.uint32
        n = int(head[2])
        offset = HEADER_INTS * 4
        if offset + n * np.dtype(tok_dtype).itemsize > size:
            raise ValueError(f"shard {str(path)!r} is truncated: its header announces {n} tokens; "
                             "re-create or remove it")
        return np.memmap(path, dtype=tok_dtype, mode="r", offset=offset, shape=(n,))
    if dtype == "auto":
        dtype = "uint16"
    if dtype not in ("uint16", "uint32"):
        raise ValueError(f"data.shard_dtype must be 'auto', 'uint16' or 'uint32', got {dtype!r}")
    item = np.dtype(dtype).itemsize
    if size % item:
        raise ValueError(f"shard {str(path)!r} has {size} bytes, not a multiple of {item} "
                         f"({dtype}); check data.shard_dtype")
    return np.memmap(path, dtype=dtype, mode="r")
