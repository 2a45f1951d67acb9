"""The one door to matplotlib, an optional dependency (the ``book`` extra): the report draws
its figures when it is installed and writes its tables without them when it is not. pyplot is
imported on the first figure, not when the report is imported, so that importing the package
(as the book's notebooks do) never switches a notebook's plotting backend to Agg."""

from __future__ import annotations


def pyplot(force: bool = True):
    """``matplotlib.pyplot`` on the Agg backend (``force``: as ``matplotlib.use`` reads it),
    or None without matplotlib."""
    try:
        import matplotlib  # optional dependency: see the module docstring

        matplotlib.use("Agg", force=force)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
