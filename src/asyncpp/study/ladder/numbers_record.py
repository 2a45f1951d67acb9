r"""The record of every number the project's pages quote: ``experiments/numbers.json``.

A page writes a measured number as a marker, ``<!--n:KEY-->VALUE<!--/n-->``.
``python experiments/report.py --fill-readme`` computes every marker of the two READMEs and of
the book's pages once (``report_markers.number``), writes the record
``{"generated_by": ..., "numbers": {KEY: VALUE}}``, and fills the READMEs from it. The book
fills its markers from the same record (:func:`fill_from_record`), never by computing them
again, so every page quotes one set of numbers:

.. math::
    \text{page}(\texttt{<!--n:}K\texttt{-->}v\texttt{<!--/n-->}) = \text{record}[K]
    \quad\text{for every marker } K,

and a marker the record lacks is an error naming the key, not a value computed in its place.
"""

from __future__ import annotations

import json
from pathlib import Path

from .paths import EXPERIMENTS, REPO
from .report_markers import NUMBER_RE, fill_numbers

NUMBERS_JSON = EXPERIMENTS / "numbers.json"
FILL_COMMAND = "python experiments/report.py --fill-readme"
BOOK = REPO / "book"


class NumberNotRecorded(LookupError):
    """A page marks a number the record does not hold (or there is no record)."""


def load_record(path: Path | None = None) -> dict[str, str]:
    """``{KEY: VALUE}`` of the record at ``path`` (default :data:`NUMBERS_JSON`)."""
    path = NUMBERS_JSON if path is None else path
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NumberNotRecorded(f"{path} does not exist: write it with `{FILL_COMMAND}`") from None
    except json.JSONDecodeError as e:
        raise NumberNotRecorded(f"{path} is not valid JSON ({e}): write it again with "
                                f"`{FILL_COMMAND}`") from None
    numbers = record.get("numbers") if isinstance(record, dict) else None
    if not isinstance(numbers, dict):
        raise NumberNotRecorded(f"{path} has no \"numbers\" object: write it again with "
                                f"`{FILL_COMMAND}`")
    return numbers


def fill_from_record(text: str, record: dict[str, str] | None = None,
                     path: Path | None = None) -> str:
    """``text`` with every marker replaced by its recorded value (``record``, else the record
    at ``path``, default :data:`NUMBERS_JSON`); raises :class:`NumberNotRecorded` naming every
    key the record lacks."""
    path = NUMBERS_JSON if path is None else path
    values = load_record(path) if record is None else record
    missing = sorted({m.group(1) for m in NUMBER_RE.finditer(text)} - values.keys())
    if missing:
        raise NumberNotRecorded(
            f"{path} lacks {len(missing)} marked number(s) a page quotes: "
            + ", ".join(missing) + f"; record them with `{FILL_COMMAND}`")
    return fill_numbers(text, values=values)


def book_pages(book: Path = BOOK) -> dict[Path, str]:
    """The text of every book page (``book/*.md``), whose markers the record holds too."""
    return {p: p.read_text(encoding="utf-8") for p in sorted(Path(book).glob("*.md"))}


__all__ = ["BOOK", "FILL_COMMAND", "NUMBERS_JSON", "NumberNotRecorded", "book_pages",
           "fill_from_record", "load_record"]
