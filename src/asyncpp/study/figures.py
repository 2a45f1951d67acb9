"""A study's figures: each cell's metric per claims seed, seeds joined across cells (the
pairing every comparison uses). matplotlib is optional (the ``book`` extra): without it the
report writes its tables and no figures."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    try:
        import matplotlib  # optional dependency: see the module docstring

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def draw_cells(study, values: dict[str, dict[int, float]], folder: Path) -> list[Path]:
    """``cells.png``: one column per cell, one point per seed, a line per seed across cells;
    returns the files written (none without matplotlib or results)."""
    plt = _pyplot()
    if plt is None or not any(values.values()):
        return []
    folder.mkdir(parents=True, exist_ok=True)
    names = list(values)
    seeds = sorted({k for v in values.values() for k in v})
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(names), 3.4))
    for k in seeds:
        xs = [i for i, c in enumerate(names) if k in values[c]]
        ax.plot(xs, [values[names[i]][k] for i in xs], "o-", lw=0.8, ms=4, alpha=0.7,
                label=f"seed {k}")
    ax.set_xticks(range(len(names)), names, rotation=20)
    ax.set_ylabel(study.metric)
    ax.set_title(study.name)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    path = folder / "cells.png"
    tmp = folder / ".cells.png.tmp.png"
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return [path]
