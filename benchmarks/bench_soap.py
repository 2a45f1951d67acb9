"""SOAP step: the vocabulary side preconditioned or not, on a ladder tier's own parameters.

SOAP (Vyas et al. 2024) keeps a Shampoo factor L = Σ G Gᵀ (and R = Σ Gᵀ G) per side of a
matrix and refreshes its eigenbasis every ``precondition_frequency`` steps, a side longer than
``max_precondition_dim`` keeps the identity basis. The paper's 49,152-token vocabulary exceeds
the default (10,000), so its SOAP leaves the embedding's vocabulary side one-sided; at the
ladder's 4,096-token vocabulary the default would precondition it, refreshing a 4,096 × 4,096
basis. This script times one optimizer step, averaged over whole refresh periods, with the
default and with the ladder's limit (``asyncpp.study.ladder.tables_opt.SOAP_AS_THE_PAPER``), in
interleaved rounds on the parameters of a ladder tier's model (gradients drawn at random: the
cost does not depend on their values). It prints the ratio of medians and writes
``results/soap_sides.json`` and its README block.
"""

from __future__ import annotations

import argparse
import os

import torch
from bench_common import interleaved, print_table, save, summary, write_readme_block

from asyncpp.models import build_model
from asyncpp.optim import build_optimizer
from asyncpp.study.ladder import tables_opt
from asyncpp.train.components import optimizer_hparams
from asyncpp.train.config import load_config

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default=os.path.join(HERE, "..", "experiments", "configs",
                                                     "opt-180k.toml"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--periods", type=int, default=2,
                    help="refresh periods (precondition_frequency steps each) per timed call")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override (smoke tests: a smaller model)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    over = [("pipeline.schedule", "1f1b"), ("optimizer.name", "soap"),
            *(tuple(x.split("=", 1)) for x in args.set)]
    cfg = load_config(args.config, over)
    default = cfg.optimizer.soap_max_precondition_dim  # SOAP's own, unless the config sets it
    ladder = int(tables_opt.SOAP_AS_THE_PAPER["optimizer.soap_max_precondition_dim"])
    model = build_model(cfg.model_config(), seed=0)
    named = list(model.named_parameters())
    shapes = sorted({tuple(p.shape) for _, p in named if p.ndim == 2})
    base = f"default ({default})"
    cases = {}
    for label, limit in ((base, default), (f"ladder ({ladder})", ladder)):
        # the optimizer asyncpp-train builds for this config, at this limit
        c = load_config(args.config, [*over, ("optimizer.soap_max_precondition_dim",
                                              str(limit))])
        params = [(n, torch.nn.Parameter(p.detach().clone())) for n, p in named]
        opt = build_optimizer("soap", params, **optimizer_hparams(c, torch.device("cpu")))
        freq = opt.param_groups[0]["precondition_frequency"]
        for _, p in params:
            p.grad = torch.randn_like(p)
        opt.step()  # the first call only initialises the factors and bases

        def steps(opt=opt, k=args.periods * freq):
            for _ in range(k):
                opt.step()
        cases[label] = steps
    calls = args.periods * freq
    times = interleaved(cases, args.rounds, warmup=0)
    rows = [(k, {s: v / calls if s != "n" else v for s, v in summary(t).items()})
            for k, t in times.items()]
    print(f"{len(named)} parameters, matrix shapes {shapes}, one thread")
    print_table("SOAP step (s, mean over whole refresh periods)", rows, baseline=base)
    med = {k: s["median"] for k, s in rows}
    ratio = med[base] / med[f"ladder ({ladder})"]
    print(f"\nstep time, default ÷ ladder = {ratio:.1f}")
    result = {"benchmark": "soap_sides", "config": os.path.basename(args.config),
              "overrides": args.set, "ladder_limit": ladder, "precondition_frequency": freq,
              "steps_per_call": calls, "rounds": args.rounds, "matrix_shapes": shapes,
              "step_s": dict(rows), "ratio_default_over_ladder": ratio}
    print("wrote", save("soap_sides", result))
    block = (f"SOAP step on `{result['config']}`'s parameters (matrix shapes "
             f"{', '.join('×'.join(map(str, s)) for s in shapes)}), one thread, median of "
             f"{args.rounds} interleaved rounds of {calls} steps:\n\n"
             "| max_precondition_dim | s per step | default ÷ this |\n| --- | --- | --- |\n"
             + "\n".join(f"| {k} | {s['median']:.4g} | {med[base] / s['median']:.1f} |"
                         for k, s in rows))
    write_readme_block("soap_sides", block)
    return result


if __name__ == "__main__":
    main()
