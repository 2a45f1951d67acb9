"""``asyncpp-train``: train a LLaMA-style model with any optimizer, schedule and correction.

Exit codes: 0 done (or stopped cleanly by ``train.stop_after``), 2 bad input (one line on
stderr naming the value and the fix; nothing written), 1 the run failed (e.g. non-finite loss),
130/143 interrupted by SIGINT/SIGTERM after writing a checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import time

from .config import (
    SECTIONS,
    ConfigError,
    field_help,
    from_dict,
    merge,
    parse_overrides,
    read_toml,
    resolve_placement,
    to_toml,
    validate,
)
from .interrupts import stop_on_signals

PROG = "asyncpp-train"

EPILOG = """\
examples:
  asyncpp-train --config configs/demo.toml
  asyncpp-train --model.name small --optimizer.name muon --pipeline.schedule 2bw \\
      --pipeline.stages 2 --pipeline.microbatches 2 --delay.correction ef
  asyncpp-train --config configs/demo.toml --print-config
  asyncpp-train --run.name demo --resume            # continue runs/demo from its checkpoint
  torchrun --nproc-per-node 2 -m asyncpp.train.cli --config ...   # multi-process executor
  torchrun --nproc-per-node 2 -m asyncpp.train.cli --config ... --pipeline.schedule wpipe \
      --pipeline.stages 4 --pipeline.microbatches 4 --model.tie_embeddings false \
      --train.clip_scope stage     # 4 partitions, two per rank (--pipeline.placement)

Every option is also a TOML key: --section.key VALUE  <=>  [section] key = VALUE.
Outputs (run directory): config.toml/json, metrics.jsonl, checkpoints/, loss.png,
summary.json, tokenizer.json, tb/ (TensorBoard, if installed), export/ (train.export).
Outside the run directory only the shared cache of trained tokenizers and token arrays is
written: data.cache_dir, else $ASYNCPP_CACHE, else $XDG_CACHE_HOME/asyncpp or ~/.cache/asyncpp.
SIGTERM/SIGINT: the current step finishes, a checkpoint is written, exit 143/130 (repeated
SIGTERMs change nothing; a second Ctrl-C ends at once); --resume continues bit-identically,
from the newest checkpoint that passes its checksum (on every rank under torchrun): a damaged
newer one is named on stderr, skipped and left on disk.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def build_parser() -> _Parser:
    ap = _Parser(prog=PROG, usage=f"{PROG} [--config TOML] [--SECTION.KEY VALUE ...] "
                 "[--print-config] [--resume] [--simulate]",
                 description="Asynchronous/synchronous pipeline-parallel pretraining of "
                 "LLaMA-style models (single process, or under torchrun).",
                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                 allow_abbrev=False)
    ap.add_argument("--config", metavar="TOML", help="configuration file (see configs/)")
    ap.add_argument("--print-config", action="store_true",
                    help="print the resolved configuration as TOML and exit")
    ap.add_argument("--resume", action="store_true",
                    help="continue the run in run.dir from its latest checkpoint")
    ap.add_argument("--simulate", action="store_true",
                    help="same as --pipeline.simulate true: run the schedule's delays in one "
                    "process")
    for sname, rows in field_help().items():
        grp = ap.add_argument_group(f"[{sname}]")
        for key, default, tname, text, choices in rows:
            shown = "(from model.name)" if default is None else f"(default: {default!r})"
            meta = "{" + ",".join(choices) + "}" if choices and len(choices) <= 6 \
                else tname.upper()
            grp.add_argument(f"--{sname}.{key}", dest=f"ov:{sname}.{key}", metavar=meta,
                             default=argparse.SUPPRESS, help=f"{text} {shown}")
    return ap


def say(text: str, stream=None) -> None:
    """Write ``asyncpp-train: <text>`` to ``stream`` (stderr) as whole lines in one write call.

    Under ``torchrun`` every rank writes to the same terminal or file; ``print`` writes the text
    and its newline separately (two system calls when output is unbuffered, as torchrun's
    ``PYTHONUNBUFFERED`` makes it), so two ranks' messages could join on one line. One write of
    newline-terminated text is one system call, which the kernel does not interleave with
    another process's write to the same file."""
    stream = sys.stderr if stream is None else stream
    lines = text.splitlines() or [""]
    stream.write("".join(f"{PROG}: {ln}\n" for ln in lines))
    stream.flush()


def _fail(message: str) -> int:
    say(f"error: {message}")
    return 2


def _world_size() -> int | None:
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        try:
            return int(os.environ["WORLD_SIZE"])
        except ValueError:
            return None
    return None


def resolve_config(args):
    """The validated Config of parsed arguments (TOML < overrides); raises ConfigError."""
    pairs = [(k[3:], v) for k, v in vars(args).items() if k.startswith("ov:")]
    if args.simulate:
        pairs.append(("pipeline.simulate", "true"))
    over = parse_overrides(pairs)
    base: dict = {}
    if args.config:
        base = read_toml(args.config)
    elif args.resume:
        # No --config: continue with the run directory's own resolved config.
        probe = from_dict(merge({}, {k: v for k, v in over.items() if k == "run"}))
        saved = probe.run_dir / "config.toml"
        if saved.is_file():
            base = read_toml(saved)
            # one process or torchrun is the launch's choice, not the run's (a run simulated
            # in one process resumes under torchrun)
            base.get("pipeline", {}).pop("simulate", None)
    cfg = from_dict(merge(base, over))
    validate(cfg, world_size=_world_size())
    return cfg


def _fmt_time(s: float) -> str:
    return f"{int(s // 60)}m{s % 60:04.1f}s" if s >= 60 else f"{s:.1f}s"


def main(argv: list[str] | None = None) -> int:
    """Console script ``asyncpp-train`` (see the module docstring for exit codes)."""
    ap = build_parser()
    args, extra = ap.parse_known_args(argv)
    if extra:
        opt = next((e for e in extra if e.startswith("--")), extra[0])
        known = [f"--{s}.{k}" for s, rows in field_help().items() for k, *_ in rows]
        name = opt.split("=")[0]
        same_key = [k for k in known if k.split(".")[-1] == name.split(".")[-1]]
        near = same_key or difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        if opt.startswith("--") and "." in opt and opt[2:].split(".")[0] not in SECTIONS:
            hint = hint or f"; sections are {', '.join(SECTIONS)}"
        return _fail(f"unrecognized argument {opt!r}{hint} (see {PROG} --help)")
    try:
        cfg = resolve_config(args)
    except ConfigError as e:
        return _fail(str(e))
    if args.print_config:
        sys.stdout.write(to_toml(cfg.resolved()))
        return 0
    from .wandb_hook import finish_wandb, require_wandb, with_wandb

    try:
        wandb = require_wandb(cfg)
    except ConfigError as e:
        return _fail(str(e))

    world = _world_size()
    from . import checkpoint as ckpt_io  # torch is imported from here on
    from . import components
    from . import run as trainer
    from .progress import progress_hooks
    from .restarts import plan_restart

    plan = plan_restart(cfg.run_dir, args.resume, cfg.run.overwrite)
    if plan.note is not None:
        say(plan.note)
    args.resume = plan.resume
    if plan.overwrite != cfg.run.overwrite:
        cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, overwrite=True))

    t0 = time.perf_counter()
    stop = {"signal": None}
    distributed = world is not None and world > 1 and not cfg.pipeline.simulate
    rank = int(os.environ.get("RANK", "0")) if distributed else 0
    if distributed:
        try:
            peak = components.peak_tflops(cfg, components.resolve_device(cfg.run.device))
        except ConfigError as e:
            return _fail(str(e))
        hooks, bar = progress_hooks(cfg, stop, peak, world)
        hooks = with_wandb(hooks, cfg, wandb if rank == 0 else None)
        from ..pipeline import PipelineError

        if rank == 0:
            placed = resolve_placement(cfg, world)
            where = (f", {placed.name} placement: rank r runs stages "
                     f"{[list(d) for d in placed.ranks]}[r]") if placed.several_per_rank else ""
            say(f"{_model_line(cfg)}; {world} ranks{where}")

        try:
            result = trainer.train_distributed(cfg, resume=args.resume,
                                               hooks=hooks if rank == 0 else None)
        except ConfigError as e:
            return _fail(str(e))
        except PipelineError as e:  # a peer died or stalled past run.peer_timeout_s
            say(f"error: {e}")
            return 1
        finally:
            if bar["bar"] is not None:
                bar["bar"].close()
            finish_wandb(wandb if rank == 0 else None)
        code = result.exit_code
        if result.error is not None:
            say(f"error: {result.error}" if rank == 0 else f"rank {rank}: error: {result.error}")
            return 1
        if code > 128:  # every rank stopped at the same step boundary (SIGTERM/SIGINT)
            say(f"rank {rank}: interrupted; checkpoint written at step {result.steps_done} "
                f"(continue with --resume --run.dir {cfg.run_dir}); exit status {code}")
            return code
        if rank == 0 and code == 0:
            _report(cfg, result, time.perf_counter() - t0)
        return code

    print(f"{PROG}: preparing data ({cfg.data.source}); a first run trains and caches the "
          "tokenizer", file=sys.stderr)
    try:
        prepared = components.prepare_run(cfg, resume=args.resume)
    except (ConfigError, ValueError) as e:
        return _fail(str(e))
    except OSError as e:  # e.g. an unwritable cache folder
        return _fail(f"{e.strerror or e}: {e.filename!r}; check data.path, data.cache_dir / "
                     "$ASYNCPP_CACHE and run.dir")
    data, ckpt, device = prepared
    for note in (ckpt or {}).pop("skipped", None) or []:
        say(note)
    print(f"{PROG}: {data.description}", file=sys.stderr)
    for line in data.warnings:
        say(line)
    say(_model_line(cfg))

    hooks, bar = progress_hooks(cfg, stop, components.peak_tflops(cfg, device), 1)
    hooks = with_wandb(hooks, cfg, wandb)
    try:
        with stop_on_signals(stop, forwarded=False):
            result = trainer.train(cfg, resume=args.resume, hooks=hooks, prepared=prepared,
                                   stop=stop)
    except components.TrainingError as e:
        say(f"error: {e}")
        return 1
    except OSError as e:  # disk full / folder removed mid-run: earlier checkpoints survive
        say(f"error: writing the run failed ({ckpt_io.disk_error_text(e)}); "
            f"{ckpt_io.newest_checkpoint_text(cfg.run_dir)}")
        return 1
    finally:
        if bar["bar"] is not None:
            bar["bar"].close()
        finish_wandb(wandb)
    if result.error is not None:
        say(f"error: {result.error}")
        return 1
    if stop["signal"] is not None:
        print(f"{PROG}: interrupted; checkpoint written at step {result.steps_done} "
              f"(continue with --resume --run.dir {cfg.run_dir})", file=sys.stderr)
        return 128 + int(stop["signal"])
    if not result.finished:
        print(f"{PROG}: stopped after step {result.steps_done} of {cfg.train.steps}; continue "
              f"with --resume --run.dir {cfg.run_dir}")
        return 0
    _report(cfg, result, time.perf_counter() - t0)
    return 0


def _model_line(cfg) -> str:
    mc = cfg.model_config()
    return (f"model {mc.name} ({mc.num_params() / 1e6:.2f}M params), optimizer "
            f"{cfg.optimizer.name}, schedule {cfg.pipeline.schedule} (P={cfg.pipeline.stages}, "
            f"m={cfg.pipeline.microbatches}, delays {cfg.stage_delays()}), correction "
            f"{cfg.delay.correction}, run dir {cfg.run_dir}")


def _report(cfg, result, wall: float) -> None:
    """The closing lines of a finished run (stdout)."""
    if not result.finished:
        print(f"{PROG}: stopped after step {result.steps_done} of {cfg.train.steps}; continue "
              f"with --resume --run.dir {cfg.run_dir}")
        return
    if result.final_train_loss is None:
        print(f"run directory: {result.run_dir}")
        return
    first = f"{result.first_train_loss:.3f} → " if result.first_train_loss is not None else ""
    val = f", val loss {result.final_val_loss:.3f}" if result.final_val_loss is not None else ""
    tps = f", {result.steady_tokens_per_s:,.0f} tokens/s (steady)" \
        if result.steady_tokens_per_s else ""
    mfu = f", MFU {100 * result.mfu:.1f} %" if result.mfu else ""
    ran = result.steps_done - result.start_step
    steps = f"{ran} of {result.steps_done} steps (resumed at step {result.start_step})" \
        if result.start_step else f"{result.steps_done} steps"
    print(f"done: {steps} in {_fmt_time(wall)}; train loss "
          f"{first}{result.final_train_loss:.3f}{val}{tps}{mfu}")
    if result.stage_report is not None:
        from .stage_report import stage_lines  # torch is imported by now

        for line in stage_lines(result.stage_report, result.steps_done):
            print(line)
    print(f"run directory: {result.run_dir}")
    if result.export is not None:
        print(f"exported model: {result.export}")
    if result.plot is not None:
        print(f"loss plot: {result.plot}")


if __name__ == "__main__":
    sys.exit(main())
