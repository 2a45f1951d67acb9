"""The progress bar of ``asyncpp-train`` (stderr): step, loss, validation loss, steady
tokens/s, MFU where the device's peak is known, and tqdm's ETA."""

from __future__ import annotations

import sys

from .components import model_flops_per_token
from .trainer import Hooks

PROG = "asyncpp-train"


def progress_hooks(cfg, stop: dict, peak_tflops: float | None = None,
                   devices: int = 1) -> tuple[Hooks, dict]:
    """Hooks drawing the bar; ``stop["signal"]`` (set by the CLI's signal handler) asks the
    trainer to stop. Tokens/s shown is the mean of the last 20 steps' (steady, not the wall
    average); MFU = (6N + 12·L·d·T)·tokens/s ÷ (peak · devices)."""
    from tqdm.auto import tqdm

    state = {"bar": None, "val": None, "recent": []}
    flops = model_flops_per_token(cfg)

    def on_start(start, total):
        state["bar"] = tqdm(total=total, initial=start, file=sys.stderr, unit="step",
                            dynamic_ncols=True, disable=not cfg.log.progress,
                            desc=cfg.run.name, smoothing=0.1)

    def on_step(rec):
        bar = state["bar"]
        if "val_loss" in rec:
            state["val"] = rec["val_loss"]
        recent = state["recent"]
        recent.append(rec.get("step_time_s") or 0.0)
        del recent[:-20]
        post = {"loss": f"{rec['train_loss']:.3f}"}
        if state["val"] is not None:
            post["val"] = f"{state['val']:.3f}"
        total = sum(recent)
        if total > 0:
            tps = len(recent) * cfg.train.batch_size * cfg.data.seq_len / total
            post["tok/s"] = f"{tps:,.0f}"
            if peak_tflops:
                post["mfu"] = f"{100 * flops * tps / (peak_tflops * 1e12 * devices):.1f}%"
        bar.set_postfix(post, refresh=False)
        bar.update(1)

    def on_message(text):
        if state["bar"] is not None:
            state["bar"].write(f"{PROG}: {text}", file=sys.stderr)
        else:
            print(f"{PROG}: {text}", file=sys.stderr)

    return Hooks(on_start=on_start, on_step=on_step, on_message=on_message,
                 should_stop=lambda: stop.get("signal") is not None), state
