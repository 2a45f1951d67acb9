"""A run's per-step curves, read from its ``metrics.jsonl`` (``asyncpp.train.metrics``) into a
result file: every study and ladder result carries them.

``step``, ``train_loss`` and ``grad_norm`` (global, before clipping) per optimizer step;
``update_norm`` (mean ‖u_t‖ of the step's combined updates) where ``delay.track_updates``
recorded it, else absent; ``val_step``/``val_loss`` at each validation. A value the metrics
wrote as a string (``"nan"``, ``"inf"``: JSON has neither) is kept as written.
"""

from __future__ import annotations

import json
from pathlib import Path


def read_curves(metrics: Path) -> dict[str, list]:
    """The curves of ``metrics`` (a ``metrics.jsonl``; empty lists when it does not exist)."""
    recs = ([json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            if metrics.is_file() else [])
    steps = [r for r in recs if "train_loss" in r]
    out = {"step": [r["step"] for r in steps],
           "train_loss": [r["train_loss"] for r in steps],
           "grad_norm": [r.get("grad_norm") for r in steps]}
    if any("update_norm" in r for r in steps):
        out["update_norm"] = [r.get("update_norm") for r in steps]
    out["val_step"] = [r["step"] for r in recs if "val_loss" in r]
    out["val_loss"] = [r["val_loss"] for r in recs if "val_loss" in r]
    return out
