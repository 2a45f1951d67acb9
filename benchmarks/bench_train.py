"""Benchmark 5 — training throughput: ``asyncpp-train``'s loop vs a plain PyTorch loop.

Both train the same model (``--model``, same seed) on the same data (the embedded corpus,
same sampler seed) with the same optimizer (Muon + its AdamW side, same hyper-parameters),
synchronously (``pipeline.schedule = none``), alternating *step by step* in one process: the
loop is :func:`asyncpp.train.loop.train` (what ``asyncpp-train`` runs, minus the terminal),
and inside its per-step callback one step of the baseline (forward → cross-entropy →
backward → clip → step) runs. Each loop step is timed from outside (from the end of one
callback to the start of the next); its first and last step (warm-up; final flush, evaluation
and checkpoint) are excluded.
Target: tokens/s of the loop ≥ 0.95 × the plain loop's.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from bench_common import print_table, save, summary

from asyncpp.data import BatchSampler
from asyncpp.models import build_model
from asyncpp.optim import build_optimizer
from asyncpp.train.config import load_config
from asyncpp.train.loop import Hooks, lm_loss, optimizer_hparams, prepare_run, train


def make_config(model: str, steps: int, batch: int, seq_len: int, run_dir: str):
    ov = {"model.name": model, "data.source": "bible", "data.seq_len": seq_len,
          "train.steps": steps, "train.batch_size": batch, "train.eval_every": 0,
          "train.eval_batches": 1, "train.grad_clip": 1.0, "train.warmup_frac": 0.0,
          "optimizer.name": "muon", "optimizer.lr": 0.02, "optimizer.adamw_lr": 0.006,
          "pipeline.schedule": "none", "run.dir": run_dir, "run.overwrite": "true",
          "run.device": "cpu", "log.progress": "false", "log.tensorboard": "off",
          "log.plot": "false"}
    return load_config(None, [(k, str(v)) for k, v in ov.items()])


class PlainLoop:
    """The baseline: the same model, sampler and optimizer in a textbook loop, one step per
    call (forward → cross-entropy → backward → clip → step → zero_grad, loss read back)."""

    def __init__(self, cfg, data):
        device = torch.device("cpu")
        self.cfg = cfg
        self.model = build_model(cfg.model_config(), device=device, seed=cfg.run.seed)
        torch.manual_seed(cfg.run.seed)
        self.opt = build_optimizer("muon", list(self.model.named_parameters()),
                                   **optimizer_hparams(cfg, device))
        self.sampler = BatchSampler(data.train, cfg.train.batch_size, seed=cfg.run.seed)
        self.model.train()

    def step(self) -> None:
        x, y = self.sampler.next_batch()
        loss = lm_loss(self.model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        float(loss.detach())   # the loop reads the loss every step too


def run_interleaved(cfg, prepared) -> dict[str, list[float]]:
    """One ``train()`` run; inside its ``on_step`` callback one plain step runs, so the two
    alternate step by step. A loop step's time is from the end of the previous callback to the
    start of this one. The first step (warm-up) and the last (flush, final evaluation,
    checkpoint) are dropped."""
    plain = PlainLoop(cfg, prepared[0])
    t = {"plain PyTorch loop": [], "asyncpp-train loop": [], "plain cpu": [], "loop cpu": []}
    mark = [time.perf_counter(), time.process_time()]

    def on_step(rec) -> None:
        t_in, c_in = time.perf_counter(), time.process_time()
        t["asyncpp-train loop"].append(t_in - mark[0])
        t["loop cpu"].append(c_in - mark[1])
        plain.step()
        t_out, c_out = time.perf_counter(), time.process_time()
        t["plain PyTorch loop"].append(t_out - t_in)
        t["plain cpu"].append(c_out - c_in)
        mark[:] = [t_out, c_out]

    train(cfg, hooks=Hooks(on_step=on_step), prepared=prepared)
    return {k: v[1:] if k.startswith("plain") else v[1:-1] for k, v in t.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="small")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    times: dict[str, list[float]] = {"plain PyTorch loop": [], "asyncpp-train loop": [],
                                     "plain cpu": [], "loop cpu": []}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = make_config(args.model, args.steps, args.batch, args.seq_len, tmp)
        prepared = prepare_run(cfg, resume=False)
        for _ in range(args.repeats):
            for k, v in run_interleaved(cfg, prepared).items():
                times[k] += v
    tokens = args.batch * args.seq_len
    rows = [(k, summary(times[k])) for k in ("plain PyTorch loop", "asyncpp-train loop")]
    cpu_rows = [(k, summary(times[k])) for k in ("plain cpu", "loop cpu")]
    n_params = build_model(cfg.model_config()).num_params()
    print(f"model {args.model} ({n_params / 1e6:.1f}M parameters), {tokens} tokens per step, "
          f"{len(times['plain PyTorch loop'])} timed steps each")
    print_table("seconds per training step (wall)", rows, baseline="plain PyTorch loop")
    print_table("CPU seconds per training step (process time: robust to other processes' load)",
                cpu_rows, baseline="plain cpu")
    tps = {k: tokens / s["median"] for k, s in rows}
    ratio = tps["asyncpp-train loop"] / tps["plain PyTorch loop"]
    cpu_ratio = statistics.median(times["plain cpu"]) / statistics.median(times["loop cpu"])
    print(f"\ntokens/s: plain {tps['plain PyTorch loop']:.0f}, asyncpp-train "
          f"{tps['asyncpp-train loop']:.0f}; ratio {ratio:.3f} (target >= 0.95); "
          f"per CPU second: ratio {cpu_ratio:.3f}")
    result = {"benchmark": "train_throughput", "model": args.model, "params": n_params,
              "tokens_per_step": tokens, "times": dict(rows), "cpu_times": dict(cpu_rows),
              "tokens_per_s": tps, "ratio": ratio, "ratio_cpu_time": cpu_ratio}
    print("wrote", save("train_throughput", result))
    return result


if __name__ == "__main__":
    main()
