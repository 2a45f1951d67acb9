r"""What a reader of the built book must never see, as patterns over the text a browser shows.

The browser check (:mod:`book.check.browser`) hands these functions the visible text of each
block of a page — paragraphs, list items, table cells, captions, headings — with math, code
and signatures replaced by a placeholder, so a pattern never matches inside rendered math or a
code sample. Each function returns ``(rule, excerpt)`` findings; an empty list means clean.

- :data:`RAW_MATH`: TeX that MathJax did not typeset (``x_{t+1}``, ``\Delta``, ``$…$``) and
  ASCII math written into prose (``x^2``, ``z^{−τ}``, ``v*_t``, ``x(t+1)``,
  ``(1−β)/(1 − βz)``, ``<=``), and Markdown that did not render (``**``, ``\*``, a backtick, a
  ``{doc}`` role).
- :data:`BUILDER_TEXT`: text written for the people who built the project rather than its
  readers — issue numbers, internal table ids ("table h1"), dates and times of writing,
  sessions, which machine had a GPU, "was not reachable".
- :func:`caption_problems`: a figure caption is a sentence, not a file name.
- :func:`tex_problems`: TeX sources MathJax typesets without an error but wrongly, e.g. a
  ``|`` swallowed into a subscript (``|\Delta_{i|}``, from ``sp.Symbol(r"|\Delta_i|")``).
"""

from __future__ import annotations

import re

PLACEHOLDER = "\u27e8·\u27e9"  # stands for rendered math / code in the text handed in

_GREEK = "α-ωΑ-Ω"
RAW_MATH: dict[str, re.Pattern] = {
    "TeX subscript/superscript group": re.compile(r"[_^]\{"),
    "TeX command": re.compile(r"\\[A-Za-z]{2,}|\\[()\[\]]"),
    "TeX between dollars": re.compile(r"(?<![\w$])\$[^$\s][^$]{0,80}?\$(?!\w)"),
    "ASCII power": re.compile(rf"[\w{_GREEK})\]*]\^[\w{_GREEK}(+\-−]"),
    "ASCII subscript": re.compile(rf"(?<![\w.\-/])[A-Za-z{_GREEK}]\*?_[A-Za-z0-9{_GREEK}]"
                                  rf"{{1,3}}(?![\w{_GREEK}])"),
    # max_s, min_t, arg max_{x}: a math subscript; not a snake_case identifier such as
    # max_grad_norm (a parameter name, two or more letters then another underscore or end)
    "ASCII min/max subscript": re.compile(
        r"\b(?:min|max|sup|inf|arg ?min|arg ?max|lim)_(?![A-Za-z]{2,}(?:_|\b))"),
    "ASCII function of time": re.compile(rf"(?<![\w{_GREEK}])[A-Za-z{_GREEK}]\("
                                         r"[tks]\s*[+\-−]\s*\d\)"),
    "ASCII fraction": re.compile(r"\)\s*/\s*\(|\b\d+\s*/\s*\([^)]*[−\-+]"),
    "ASCII relation": re.compile(r"(?<![<>=!-])(?:<=|>=|!=)(?![<>=])"),
    "unrendered Markdown emphasis": re.compile(r"\*\*|\\\*|(?:^|\s)\*(?=\w[^*]*$)"),
    "unrendered Markdown code": re.compile(r"`"),
    "unrendered MyST role": re.compile(r"\{(?:doc|ref|numref|eq|math|py:\w+|term)\}"),
}

BUILDER_TEXT: dict[str, re.Pattern] = {
    "names an issue": re.compile(
        r"\bissues?\s+#?\d+|\bthe issue['’]s\b|\bthis issue\b|\bas the issue\b"
        r"|\bthe issue (?:asks|wants|says|lists|names)\b", re.I),
    # the sweep's lower-case table ids ("table h1", "table efg-beta"), not a page's own "H1"
    "internal table id": re.compile(
        r"\b[Tt]ables?\s+(?:h\d|h\d-\w+|efg(?:-\w+)?|nag|wpipe|gpu\d*|lr|flat)\b"),
    "date of writing": re.compile(
        r"\b20\d\d-\d\d-\d\d\b|\b\d{1,2}:\d\d\s*UTC\b|\bwritten on\b|\bat the time of writing\b"
        r"|\bwhen (?:this|the) (?:page|section|file) was written\b", re.I),
    "names a session": re.compile(r"\bsessions?\b", re.I),
    "how the project was built": re.compile(
        r"\bwas not reachable\b|\bno GPU (?:was|has been|is) (?:lent|available)"
        r"|\b(?:was|were) lent\b|\bthis task\b|\bwhich machine\b|\bthe lead\b", re.I),
}

_FILE_NAME = re.compile(r"\S+\.(?:png|svg|jpe?g|gif|pdf)\b|^\S+$", re.I)
_TERMINAL = re.compile(r"[.!?:)]$")


def _excerpt(text: str, m: re.Match, width: int = 40) -> str:
    a, b = max(0, m.start() - width), min(len(text), m.end() + width)
    return ("…" if a else "") + text[a:b].strip() + ("…" if b < len(text) else "")


def text_problems(text: str) -> list[tuple[str, str]]:
    """Raw TeX, ASCII math, unrendered Markdown and builder-facing text in one block of
    visible text (math and code already replaced by :data:`PLACEHOLDER`)."""
    out = []
    for rules in (RAW_MATH, BUILDER_TEXT):
        for rule, pattern in rules.items():
            m = pattern.search(text)
            if m:
                out.append((rule, _excerpt(text, m)))
    return out


def caption_problems(caption: str | None) -> list[tuple[str, str]]:
    """A figure caption must exist and be a sentence: at least four words, no file name, a
    capital (or a symbol) first and closing punctuation last."""
    text = " ".join((caption or "").replace("¶", " ").replace("#", " ").split())
    if not text:
        return [("figure without caption", "")]
    out = []
    if _FILE_NAME.search(text):
        out.append(("caption is a file name", text[:80]))
    elif len(text.split()) < 4:
        out.append(("caption is not a sentence (fewer than four words)", text[:80]))
    elif text[0].islower() or not _TERMINAL.search(text):
        out.append(("caption is not a sentence (capital first, full stop last)", text[:80]))
    return out


_SWALLOWED_BAR = re.compile(r"[_^]\{[^{}]*[^\\{]\|\}")


def tex_problems(tex: str) -> list[tuple[str, str]]:
    """TeX MathJax renders without error but not as meant: a delimiter ``|`` closing a
    sub/superscript group (``|\\Delta_{i|}``)."""
    m = _SWALLOWED_BAR.search(tex)
    return [("delimiter inside a subscript", _excerpt(tex, m, 20))] if m else []
