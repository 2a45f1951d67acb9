r"""Issue 20, item 4, first experiment: the stability edge of the tiny model, directly.

For SGD with (EMA) momentum, Muon and AdamW, at two momenta β, find the largest learning rate
that trains without diverging, for four delay modes: synchronous, asynchronous (one-step delay,
no correction), asynchronous + EF (γ = 1) and asynchronous + EF(γ*) (``ef_gamma="auto"``).
Then compare the measured ratios of the largest stable lr with T3's ratios of c*
(pre-registered in ``experiments/stability_edge/PREREGISTRATION.md`` before any run).

Self-contained: the tiny model (``asyncpp.models``), the optimizers (``asyncpp.optim`` and
``torch.optim.SGD(momentum=β, dampening=β)``, T3's model), the delay core
(``asyncpp.delay.DelayedOptimizer``, ``formulation="gradient"``, what the pipeline realises) and
byte-level tokens of the embedded corpus (``asyncpp.data.corpus``); not the trainer.

Criterion (fixed before running): a run of ``STEPS`` steps *trains* when every loss is finite
and the mean training loss of its last 10 steps is below the loss of its first batch.
Search per cell: from a start lr, double (or halve) until the criterion flips, then bisect
``BISECT`` times in log space; the edge is the largest lr that trained (resolution
2^(1/2^BISECT)). This assumes the criterion is monotone in lr over the bracket (reported:
every run is logged, so a non-monotone cell can be seen).

Usage::

    python experiments/stability_edge.py            # all cells, results as they finish
    python experiments/stability_edge.py --quick    # 2 optimizers, 1 β, for a smoke test

Results: ``experiments/stability_edge/results.json`` (rewritten atomically after every cell)
and ``experiments/stability_edge/runs.jsonl`` (one line per run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent / "stability_edge"
STEPS = 120
BATCH, SEQ = 8, 32
BISECT = 3
MODES = ("sync", "async", "ef", "ef_gamma_star")
START = {"sgd": 0.05, "adamw": 1e-3, "muon": 0.01}
#: the search gives up above this lr and reports the cell as "no edge found below MAX_LR"
MAX_LR = {"sgd": 1e3, "adamw": 10.0, "muon": 100.0}


def tokens() -> np.ndarray:
    """Byte-level tokens (ids < 256 < the tiny model's 512) of the embedded KJV corpus."""
    from asyncpp.data.corpus import kjv_documents

    text = "".join(kjv_documents(max_documents=200))
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)


def batches(toks: np.ndarray, n: int, seed: int = 0):
    """``n`` (inputs, targets) batches of random windows, the same for every run."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        idx = rng.integers(0, len(toks) - SEQ - 1, size=BATCH)
        rows = np.stack([toks[i:i + SEQ + 1] for i in idx])
        t = torch.from_numpy(rows)
        out.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
    return out


def make_optimizer(name: str, model, lr: float, beta: float):
    """SGD(momentum=β, dampening=β) (T3's EMA momentum), Muon (momentum β; its AdamW group at a
    fixed lr 3e-3 with β₁ = β), AdamW (β₁ = β, β₂ = 0.95); no weight decay anywhere."""
    from asyncpp.optim import build_optimizer

    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=beta, dampening=beta)
    if name == "muon":
        return build_optimizer("muon", model.named_parameters(), lr=lr, momentum=beta,
                               nesterov=False, weight_decay=0.0, adamw_lr=3e-3,
                               adamw_betas=(beta, 0.95), ns_dtype="float32")
    if name == "adamw":
        return build_optimizer("adamw", model.named_parameters(), lr=lr, betas=(beta, 0.95),
                               weight_decay=0.0)
    raise ValueError(name)


def run(name: str, mode: str, lr: float, beta: float, data) -> dict:
    """One run; returns the losses' summary and whether it trained."""
    from asyncpp.delay import DelayedOptimizer
    from asyncpp.models import build_model

    model = build_model("tiny", seed=0)
    opt = make_optimizer(name, model, lr, beta)
    if mode == "sync":
        d = DelayedOptimizer(opt, delay=0)
    elif mode == "async":
        d = DelayedOptimizer(opt, delay=1)
    elif mode == "ef":
        d = DelayedOptimizer(opt, delay=1, correction="ef")
    else:
        d = DelayedOptimizer(opt, delay=1, correction="ef", ef_gamma="auto")
    losses = []
    t0 = time.perf_counter()
    for x, y in data:
        d.zero_grad()
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        v = float(loss.detach())
        losses.append(v)
        if not math.isfinite(v):
            break
        loss.backward()
        d.step()
    finite = len(losses) == len(data) and all(math.isfinite(v) for v in losses) and all(
        bool(torch.isfinite(p).all()) for p in model.parameters())
    final = float(np.mean(losses[-10:])) if finite else float("nan")
    return {"opt": name, "mode": mode, "beta": beta, "lr": lr, "initial": losses[0],
            "final": final, "finite": finite, "trained": bool(finite and final < losses[0]),
            "gammas": list(getattr(d, "ef_gammas", [])), "seconds": time.perf_counter() - t0}


def edge(name: str, mode: str, beta: float, data, log) -> dict:
    """Largest lr that trains (doubling/halving bracket, then log-space bisection)."""
    runs = []

    def ok(lr):
        r = run(name, mode, lr, beta, data)
        runs.append(r)
        log(r)
        return r["trained"]

    lr = START[name]
    if ok(lr):
        lo = lr
        hi = lr * 2
        while ok(hi):
            lo, hi = hi, hi * 2
            if hi > MAX_LR[name]:
                return {"opt": name, "mode": mode, "beta": beta, "lr_edge": lo,
                        "lr_first_fail": None, "resolution": None, "runs": len(runs),
                        "monotone": all(r["trained"] for r in runs), "no_edge_below": lo}
    else:
        hi = lr
        lo = lr / 2
        while not ok(lo):
            hi, lo = lo, lo / 2
            if lo < 1e-9:
                break
    for _ in range(BISECT):
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return {"opt": name, "mode": mode, "beta": beta, "lr_edge": lo, "lr_first_fail": hi,
            "resolution": hi / lo, "runs": len(runs),
            "monotone": all(r["trained"] == (r["lr"] <= lo) for r in runs)}


def predictions(beta: float) -> dict:
    """T3's c* (τ = 1) for the four modes, and the ratios to compare."""
    from theory import stability as T3

    c = {"sync": T3.critical_step(beta, 0), "async": T3.critical_step(beta, 1, False),
         "ef": T3.critical_step(beta, 1, True), "ef_gamma_star": T3.optimal_gamma(beta, 1)[1]}
    return {"c_star": c, "gamma_star": T3.optimal_gamma(beta, 1)[0],
            "ratios": {"async/sync": c["async"] / c["sync"], "ef/sync": c["ef"] / c["sync"],
                       "ef_gamma_star/sync": c["ef_gamma_star"] / c["sync"],
                       "ef/async": c["ef"] / c["async"],
                       "ef_gamma_star/ef": c["ef_gamma_star"] / c["ef"]}}


def write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


RATIOS = (("async", "sync"), ("ef", "sync"), ("ef_gamma_star", "sync"), ("ef", "async"),
          ("ef_gamma_star", "ef"))


def report(results: dict) -> str:
    """Markdown: the measured edges per cell, and measured against predicted ratios."""
    cells = results.get("cells", {})
    lines = ["| optimizer | β | " + " | ".join(MODES) + " | runs | monotone |",
             "| --- | --: | " + " | ".join("--:" for _ in MODES) + " | --: | :-: |"]
    keys = sorted({tuple(k.split("/")[:2]) for k in cells})
    for name, b in keys:
        row = [cells.get(f"{name}/{b}/{m}") for m in MODES]
        lines.append(f"| {name} | {b} | " + " | ".join(
            ("—" if not c else f"≥ {c['lr_edge']:.3g} (no edge)" if c.get("no_edge_below")
             else f"{c['lr_edge']:.3g}") for c in row) + " | "
            + str(sum(c["runs"] for c in row if c)) + " | "
            + ("yes" if all(c["monotone"] for c in row if c) else "**no**") + " |")
    lines += ["", "| optimizer | β | " + " | ".join(f"{a}/{b}" for a, b in RATIOS) + " |",
              "| --- | --: | " + " | ".join("--:" for _ in RATIOS) + " |"]
    for name, b in keys:
        pred = results["predictions"].get(b, {}).get("ratios", {})
        vals = []
        for a, d in RATIOS:
            ca, cd = cells.get(f"{name}/{b}/{a}"), cells.get(f"{name}/{b}/{d}")
            meas = ("—" if not (ca and cd) else "n/a (no edge)"
                    if ca.get("no_edge_below") or cd.get("no_edge_below")
                    else f"{ca['lr_edge'] / cd['lr_edge']:.3g}")
            vals.append(f"{meas} (T3 {pred.get(f'{a}/{d}', float('nan')):.3g})")
        lines.append(f"| {name} | {b} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--report", action="store_true",
                    help="print the Markdown tables of results.json and exit")
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args(argv)
    if args.report:
        print(report(json.loads((Path(args.out) / "results.json").read_text())))
        return 0
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = batches(tokens(), STEPS)
    opts = ("sgd", "adamw") if args.quick else ("sgd", "adamw", "muon")
    betas = (0.9,) if args.quick else (0.9, 0.95)
    runs_path = out / "runs.jsonl"
    res_path = out / "results.json"
    results = json.loads(res_path.read_text()) if res_path.exists() else {}
    results.setdefault("settings", {"steps": STEPS, "batch": BATCH, "seq_len": SEQ,
                                    "bisect": BISECT, "model": "tiny", "delay": 1,
                                    "criterion": "all losses finite and mean of the last 10 "
                                                 "training losses < the first loss"})
    results.setdefault("cells", {})
    results["predictions"] = {str(b): predictions(b) for b in betas}

    def log(r):
        with open(runs_path, "a") as f:
            f.write(json.dumps(r) + "\n")
        print(f"{r['opt']:5s} {r['mode']:13s} beta={r['beta']} lr={r['lr']:.4g} "
              f"trained={r['trained']} final={r['final']:.4g} ({r['seconds']:.1f}s)",
              flush=True)

    # SGD and AdamW at both β first, Muon last (its edge, if any, is the costliest to find)
    order = [(b, n) for n in opts if n != "muon" for b in betas] + \
        [(b, "muon") for b in betas if "muon" in opts]
    for beta, name in order:
        for mode in MODES:
            key = f"{name}/{beta}/{mode}"
            if key in results["cells"]:
                continue
            results["cells"][key] = edge(name, mode, beta, data, log)
            write_json(res_path, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
