r"""The smallest text of a figure, recorded in its PNG so that a browser check can measure it.

A PNG says nothing about the size of the text drawn in it, and the browser shows it scaled.
So every matplotlib figure the book builds records, when it is saved, the height of its
smallest visible text in PNG pixels (a ``tEXt`` chunk named :data:`KEY`):

.. math::

    s_\text{png} = \min_{t \in \text{texts}} \mathrm{fontsize}_t \cdot \frac{\mathrm{dpi}}{72},

the font size in points of every visible, non-empty text artist (tick labels, axis labels,
titles, legend entries, annotations) at the dpi it is saved with. A page that shows the PNG at
``w`` CSS pixels of its natural width ``W`` shows that text at
:math:`s_\text{css} = s_\text{png}\, w / W` pixels; the check requires
:math:`s_\text{css} \ge` :data:`MIN_TEXT_PX`.

:func:`install` wraps ``FigureCanvasAgg.print_png`` (the one writer behind ``savefig(...png)``,
the inline backend and ``plt.show()`` in a kernel) so that the record is written whoever saves
the figure; the book's kernels install it at start-up (``book/_ext/asyncpp_book_env.py``).
:func:`read` parses it back from the PNG bytes, with no image library.
"""

from __future__ import annotations

import functools
import struct
import zlib

KEY = "asyncpp:min_text_px"
MIN_TEXT_PX = 9.0  # CSS pixels: the smallest text a reader reads without zooming
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def min_text_px(fig) -> float | None:
    """:math:`\\min_t \\mathrm{fontsize}_t \\cdot \\mathrm{dpi}/72` over the visible,
    non-empty texts of ``fig`` at its current dpi (during ``savefig`` the save dpi); None
    when it draws no text."""
    from matplotlib.text import Text

    sizes = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        ax = t.axes
        if ax is not None and not ax.get_visible():
            continue
        if t.get_alpha() == 0:
            continue
        sizes.append(t.get_fontsize() * fig.dpi / 72.0)
    return min(sizes) if sizes else None


def install() -> None:
    """Make every PNG that matplotlib's Agg canvas writes carry :data:`KEY` (idempotent)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if getattr(FigureCanvasAgg.print_png, "_asyncpp_records_text", False):
        return
    original = FigureCanvasAgg.print_png

    # wraps: print_figure passes a matplotlib method only the keywords its signature names
    @functools.wraps(original)
    def print_png(self, filename_or_obj, *, metadata=None, pil_kwargs=None):
        size = min_text_px(self.figure)
        if size is not None:
            metadata = {**(metadata or {}), KEY: f"{size:.3f}"}
        return original(self, filename_or_obj, metadata=metadata, pil_kwargs=pil_kwargs)

    print_png._asyncpp_records_text = True
    FigureCanvasAgg.print_png = print_png


def uninstall() -> None:
    """Undo :func:`install` (idempotent): the book's kernels keep the record for their whole
    life, a test that installs it must not leave it to the tests that follow, which compare
    saved figures byte for byte."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    current = FigureCanvasAgg.print_png
    if getattr(current, "_asyncpp_records_text", False):
        FigureCanvasAgg.print_png = current.__wrapped__


def chunks(data: bytes):
    """``(type, payload)`` of every chunk of a PNG; ValueError when ``data`` is not a PNG."""
    if not data.startswith(_PNG_MAGIC):
        raise ValueError("not a PNG")
    i = len(_PNG_MAGIC)
    while i + 8 <= len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        kind = data[i + 4:i + 8].decode("latin-1")
        yield kind, data[i + 8:i + 8 + n]
        if kind == "IEND":
            return
        i += 12 + n


def read(data: bytes) -> dict[str, str]:
    """The ``tEXt``/``zTXt``/``iTXt`` entries of a PNG as ``{key: text}``."""
    out = {}
    for kind, payload in chunks(data):
        if kind == "tEXt" and b"\0" in payload:
            key, text = payload.split(b"\0", 1)
            out[key.decode("latin-1")] = text.decode("latin-1")
        elif kind == "zTXt" and b"\0" in payload:
            key, rest = payload.split(b"\0", 1)
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == "iTXt" and b"\0" in payload:
            key, rest = payload.split(b"\0", 1)
            compressed, _method = rest[0], rest[1]
            _lang, _tkey, text = rest[2:].split(b"\0", 2)
            out[key.decode("utf-8")] = (zlib.decompress(text) if compressed else text
                                        ).decode("utf-8")
    return out


def recorded_text_px(data: bytes) -> float | None:
    """The :data:`KEY` record of a PNG in its own pixels, or None when it has none."""
    value = read(data).get(KEY)
    return float(value) if value is not None else None


def size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` of a PNG in pixels, from its IHDR chunk."""
    for kind, payload in chunks(data):
        if kind == "IHDR":
            return struct.unpack(">II", payload[:8])
    raise ValueError("PNG without IHDR")
