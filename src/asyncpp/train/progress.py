"""The progress of ``asyncpp-train`` on stderr: step, loss, validation loss, steady tokens/s,
MFU where the device's peak is known. On a terminal, a bar with tqdm's ETA; otherwise (a log
file, a job scheduler, a pipe) plain timestamped lines — a bar's carriage returns would make
one unreadable line — at the first and last step, every validation, and every
``max(1, T // 20)`` steps of a T-step run."""

from __future__ import annotations

import sys
import time

from .components import model_flops_per_token
from .trainer import Hooks

PROG = "asyncpp-train"


def progress_hooks(cfg, stop: dict, peak_tflops: float | None = None,
                   devices: int = 1) -> tuple[Hooks, dict]:
    """Hooks drawing the bar; ``stop["signal"]`` (set by the CLI's signal handler) asks the
    trainer to stop. Tokens/s shown is the mean of the last 20 steps' (steady, not the wall
    average); MFU = (6N + 12·L·d·T)·tokens/s ÷ (peak · devices)."""
    from tqdm.auto import tqdm

    state = {"bar": None, "val": None, "recent": [], "total": 0}
    flops = model_flops_per_token(cfg)
    plain = cfg.log.progress and not sys.stderr.isatty()

    def on_start(start, total):
        state["total"] = total
        state["bar"] = tqdm(total=total, initial=start, file=sys.stderr, unit="step",
                            dynamic_ncols=True, disable=plain or not cfg.log.progress,
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
        if plain:
            step, total = rec["step"], state["total"]
            if step == 1 or step == total or "val_loss" in rec \
                    or step % max(1, total // 20) == 0:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                fields = " ".join(f"{k} {v}" for k, v in post.items())
                print(f"{stamp} {PROG}: step {step}/{total} {fields}", file=sys.stderr,
                      flush=True)
        bar.set_postfix(post, refresh=False)
        bar.update(1)

    def on_message(text):
        if state["bar"] is not None:
            state["bar"].write(f"{PROG}: {text}", file=sys.stderr)
        else:
            print(f"{PROG}: {text}", file=sys.stderr)

    return Hooks(on_start=on_start, on_step=on_step, on_message=on_message,
                 should_stop=lambda: stop.get("signal") is not None), state
