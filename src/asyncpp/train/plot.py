r"""``asyncpp-plot RUN_DIR [RUN_DIR ...] -o out.png``: loss curves of several runs on one PNG.

Train loss is drawn raw (faint) and smoothed by an exponential moving average with bias correction,
:math:`s_t = \alpha s_{t-1} + (1-\alpha)\ell_t`, :math:`\hat s_t = s_t/(1-\alpha^t)`;
validation losses are drawn as markers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .metrics import read_metrics


def smooth(values: list[float], alpha: float) -> list[float]:
    r"""Bias-corrected EMA :math:`\hat s_t` of the module docstring (alpha = 0: unchanged)."""
    out, s = [], 0.0
    for t, v in enumerate(values, 1):
        s = alpha * s + (1 - alpha) * v
        out.append(s / (1 - alpha ** t) if alpha else v)
    return out


def run_label(run_dir: Path) -> str:
    """``name (optimizer, schedule[, correction])`` from the run's resolved config."""
    try:
        cfg = json.loads((run_dir / "config.json").read_text())
        parts = [cfg["optimizer"]["name"], cfg["pipeline"]["schedule"]]
        if cfg["delay"].get("correction", "none") != "none":
            parts.append(cfg["delay"]["correction"])
        return f"{run_dir.name} ({', '.join(parts)})"
    except (OSError, KeyError, ValueError):
        return run_dir.name


def plot_runs(run_dirs: list[str | os.PathLike], out: str | os.PathLike, *, x: str = "step",
              alpha: float = 0.8, title: str | None = None) -> Path:
    """Draw train (smoothed) and validation loss of ``run_dirs`` against ``x`` (``step`` or
    ``tokens``) into the PNG ``out``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for i, rd in enumerate(map(Path, run_dirs)):
        recs = read_metrics(rd / "metrics.jsonl")
        color = f"C{i % 10}"
        tr = [r for r in recs if isinstance(r.get("train_loss"), (int, float))]
        if tr:
            xs, ys = [r[x] for r in tr], [r["train_loss"] for r in tr]
            ax.plot(xs, ys, color=color, lw=0.6, alpha=0.3)
            ax.plot(xs, smooth(ys, alpha), color=color, lw=1.4,
                    label=f"{run_label(rd)} train" + (f" (EMA {alpha:g})" if alpha else ""))
        va = [r for r in recs if isinstance(r.get("val_loss"), (int, float))]
        if va:
            ax.plot([r[x] for r in va], [r["val_loss"] for r in va], "o--", color=color, ms=4,
                    lw=0.8, label=f"{run_label(rd)} val")
    ax.set_xlabel("optimizer step" if x == "step" else "tokens")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title or "loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """Console script ``asyncpp-plot``."""
    ap = argparse.ArgumentParser(prog="asyncpp-plot", description="Plot the loss curves of one "
                                 "or more asyncpp runs on one PNG.")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (metrics.jsonl)")
    ap.add_argument("-o", "--output", default=None,
                    help="output PNG (default: compare.png in the folder holding the first run, "
                         "e.g. runs/compare.png — never the current directory)")
    ap.add_argument("--x", choices=("step", "tokens"), default="step", help="x axis")
    ap.add_argument("--smooth", type=float, default=0.8,
                    help="EMA factor for the train loss, in [0, 1) (default: 0.8)")
    ap.add_argument("--title", default=None, help="figure title")
    args = ap.parse_args(argv)
    for rd in args.runs:
        if not (Path(rd) / "metrics.jsonl").is_file():
            print(f"asyncpp-plot: error: {rd!r} has no metrics.jsonl; pass run directories "
                  "written by asyncpp-train", file=sys.stderr)
            return 2
    if not 0 <= args.smooth < 1:
        print(f"asyncpp-plot: error: --smooth must lie in [0, 1), got {args.smooth}",
              file=sys.stderr)
        return 2
    output = args.output or str(Path(args.runs[0]).resolve().parent / "compare.png")
    try:
        out = plot_runs(args.runs, output, x=args.x, alpha=args.smooth, title=args.title)
    except ImportError:
        print("asyncpp-plot: error: matplotlib is not installed; `pip install matplotlib`",
              file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
