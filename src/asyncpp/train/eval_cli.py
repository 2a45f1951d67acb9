r"""``asyncpp-eval RUN_DIR [--data.KEY VALUE ...]``: the validation loss of a run's model.

Loads the newest valid checkpoint of any run (one process or ``torchrun``;
:mod:`asyncpp.train.restore`) and scores the whole validation split,

.. math::
    L = \sum_s \frac{W_s}{\sum_r W_r}\, L_s ,\qquad
    L_s = -\frac{1}{W_s T}\sum_{w\in s}\sum_{t}\log p_\theta(y_{w,t}\mid x_{w,\le t}),

(sources s with W_s windows of T tokens; :class:`~asyncpp.train.components.Evaluation`;
batches cut to a multiple of ``pipeline.microbatches``, as the run's final validation) —
of the run's own data, or of any data source given by ``--data.*`` options (its held-out
``data.val_fraction``, tokenized with the run's tokenizer). Prints one line
``val loss X`` on stdout (per-source losses, when there are several, on stderr).
Exit codes: 0 scored, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys

PROG = "asyncpp-eval"
DATA_KEYS = ("source", "path", "text_field", "hf_name", "hf_config", "hf_split",
             "max_documents", "val_fraction", "val_path", "shard_dtype", "cache_dir")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def build_parser() -> _Parser:
    ap = _Parser(prog=PROG, description="Validation loss of a run's newest valid checkpoint, "
                 "on its own validation split or on another data source.",
                 epilog="examples:\n  asyncpp-eval runs/demo\n"
                 "  asyncpp-eval runs/demo --data.source files --data.path notes/",
                 formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (run.dir)")
    for key in DATA_KEYS:
        ap.add_argument(f"--data.{key}", dest=f"ov:data.{key}", default=argparse.SUPPRESS,
                        metavar="VALUE", help=f"as asyncpp-train's --data.{key}")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .config import ConfigError, from_dict, merge, parse_overrides, validate

    pairs = [(k[3:], v) for k, v in vars(args).items() if k.startswith("ov:")]
    try:
        over = parse_overrides(pairs)
        from .restore import restore_run

        run = restore_run(args.run_dir)
        base = run.cfg.to_dict()
        if over:
            # Another corpus is read with the run's own tokenizer: ids mean what they meant
            # in training.
            tok = run.run_dir / "tokenizer.json"
            if base["data"]["tokenizer"] == "bpe":
                if not tok.is_file():
                    raise ConfigError(f"{str(tok)!r} is missing; the run's tokenizer is needed "
                                      "to read other data")
                over["data"]["tokenizer"] = str(tok)
            for k in ("path", "val_path", "hf_name"):
                over["data"].setdefault(k, "")
        cfg = from_dict(merge(base, over))
        validate(cfg)
        scored = _score(run, cfg)
    except (ConfigError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    for note in run.notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    if len(scored.by_source) > 1:
        for name, loss in sorted(scored.by_source.items()):
            print(f"{PROG}: {name}: {loss:.6f}", file=sys.stderr)
    print(f"val loss {scored.loss:.6f}")
    return 0


def _score(run, cfg):
    import dataclasses

    import torch

    from ..data import load_data
    from .components import evaluate, lm_loss

    data = load_data(cfg.data, cfg.model_config().vocab_size)
    if data.val is None or data.val.num_windows == 0:
        raise ValueError(f"the data ({data.description}) has no validation windows of "
                         f"{cfg.data.seq_len} tokens; raise data.val_fraction or add text")
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, final_eval="full"))
    model = run.model

    def loss_of(x, y):
        return lm_loss(model(x), y)

    with torch.no_grad():
        # batches cut to a multiple of the microbatches: the windows the run's own final
        # validation scored, so the number equals its final_val_loss
        return evaluate(loss_of, data, cfg, True, torch.device("cpu"),
                        cfg.pipeline.microbatches)


if __name__ == "__main__":
    sys.exit(main())
