"""``asyncpp-study``: plan, run, follow and report a declared study (``asyncpp.study.spec``).

- ``plan STUDY`` — the runs the study needs and which are on disk; nothing is run.
- ``run STUDY [--lanes N] [--gpus-per-lane G] [--deadline WHEN]`` — train what is missing:
  first every lr-selection run, then the claims runs with each cell's chosen lr.
- ``status STUDY`` — runs done / left and the lr chosen per cell.
- ``report STUDY`` — ``tables.md``, ``figures/`` and ``report.json`` in the study's folder.
- ``reproduce STUDY RESULT [--keep DIR]`` — re-run one result from its record and say whether it
  lands bit for bit, or how far and from which step (``asyncpp.study.reproduce``).
- ``power STUDY [--source claims|selection] [--power P] [--alpha A]`` — the seeds each endpoint
  needs, from the claims results or from the selection runs at the chosen lr (a pilot), beside
  the seeds declared (``asyncpp.study.planning``); nothing is run.

A ladder study (``[study] kind = "ladder"``, the project's own tiers in ``experiments/``) is
reported by :func:`asyncpp.study.ladder.report_tier`; ``plan``/``status`` list its tables
through the sweep and ``run`` starts ``experiments/ladder.sh`` lanes
(:mod:`asyncpp.study.ladder.study_commands`).

Exit codes: 0 done; 1 a run failed; 2 bad input (one line on stderr); 3 the deadline stopped
the study with runs left (run again to continue); 4 ``reproduce`` re-ran the result and it
differs from the record.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib
import re
import sys
import time
from pathlib import Path

from . import planning, runner
from .report import write_report
from .reproduce import main_reproduce
from .spec import Study, StudyError, load

PROG = "asyncpp-study"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2
        self.exit(2, f"{PROG}: error: {message} (see {PROG} --help)\n")


def parse_deadline(text: str, now: float | None = None) -> float:
    """A deadline as epoch seconds from ``+90m``/``+2h``/``+300s``, ``HH:MM`` (UTC, the next
    such time) or an ISO 8601 date-time (UTC unless it names a zone)."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"\+(\d+(?:\.\d+)?)([smh])", text.strip())
    if m:
        return now + float(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", text.strip())
    if m and int(m.group(1)) < 24 and int(m.group(2)) < 60:
        today = dt.datetime.fromtimestamp(now, dt.timezone.utc)
        at = today.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=0,
                           microsecond=0)
        if at.timestamp() <= now:
            at += dt.timedelta(days=1)
        return at.timestamp()
    try:
        at = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--deadline {text!r}: write +90m, +2h, HH:MM (UTC) or an ISO "
                         "date-time") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.timezone.utc)
    return at.timestamp()


def build_parser() -> _Parser:
    ap = _Parser(prog=PROG, description="Run a declared study (cells, seeds, lr rule, "
                 "endpoints) resumably and report it with paired statistics.",
                 epilog="examples:\n  asyncpp-study plan configs/study-tiny.toml\n"
                 "  asyncpp-study run configs/study-tiny.toml --lanes 2\n"
                 "  asyncpp-study report configs/study-tiny.toml\n"
                 "  asyncpp-study power configs/study-tiny.toml --source selection\n"
                 "  asyncpp-study reproduce configs/study-tiny.toml "
                 "runs/study-tiny/results/sync/seed0.json\n"
                 "  asyncpp-study report experiments/opt-180k/study.toml",
                 formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, text in (("plan", "list the runs and which are on disk"),
                       ("run", "train the runs not on disk"),
                       ("status", "runs done and left, lr chosen per cell"),
                       ("report", "write tables.md, figures/ and report.json"),
                       ("reproduce", "re-run one result from its record and compare"),
                       ("power", "the seeds each endpoint needs, beside those declared")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("study", metavar="STUDY", help="the study file (TOML)")
        if name == "reproduce":
            p.add_argument("result", metavar="RESULT", help="a result JSON of the study")
            p.add_argument("--keep", metavar="DIR", help="keep the re-run and "
                           "reproduction.json in DIR (default: a temporary folder, removed)")
        p.add_argument("--out", metavar="DIR", help="the study's folder (default: [study] out, "
                       "else runs/<name>)")
        if name == "power":
            p.add_argument("--source", choices=("claims", "selection"), default="claims",
                           help="the runs to plan from: the claims results (default) or the "
                           "selection runs at each cell's chosen lr (a pilot, before any "
                           "claims run)")
            p.add_argument("--power", type=float, default=0.8, metavar="P",
                           help="the power to plan for (default 0.8)")
            p.add_argument("--alpha", type=float, default=0.05, metavar="A",
                           help="the family's level; primaries are planned at A/M (default "
                           "0.05)")
        if name == "run":
            p.add_argument("--lanes", type=int, default=1, metavar="N",
                           help="runs at a time, each its own process (default 1)")
            p.add_argument("--gpus-per-lane", type=int, default=0, metavar="G",
                           help="give lane i the GPUs i*G..(i+1)*G-1 (CUDA_VISIBLE_DEVICES); "
                           "0 leaves the environment alone (default)")
            p.add_argument("--deadline", metavar="WHEN",
                           help="stop by then: +90m, +2h, HH:MM (UTC) or ISO date-time")
    return ap


def _say(text: str) -> None:
    sys.stderr.write(f"{PROG}: {text}\n")
    sys.stderr.flush()


def _plan_lines(study: Study) -> list[str]:
    sel = runner.selection_runs(study)
    claims, waiting = runner.claims_runs(study)
    lines = []
    for r in sel + claims:
        lines.append(f"{'done' if runner.done(r) else 'todo'}  {r.label()}  {r.key}")
    for c in waiting:
        lines.append(f"wait  {c}: {len(study.claims_of(c))} claims run(s) after its lr is chosen")
    keys = {r.key for r in sel + claims}
    lines.append(f"{len(sel)} selection + {len(claims)} claims run(s) "
                 f"({len(keys)} distinct), {sum(runner.done(r) for r in sel + claims)} on disk"
                 + (f"; {len(waiting)} cell(s) wait for their lr" if waiting else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    """Console script ``asyncpp-study`` (exit codes in the module docstring)."""
    args = build_parser().parse_args(argv)
    try:
        study = load(args.study)
        deadline = parse_deadline(args.deadline) if getattr(args, "deadline", None) else None
    except (StudyError, ValueError) as e:
        _say(f"error: {e}")
        return 2
    if args.command == "reproduce" and study.kind == "ladder":
        _say("error: a ladder study's results re-run with experiments/reproduce.py")
        return 2
    if args.command == "power" and study.kind == "ladder":
        _say("error: a ladder study's seed counts are experiments/protocol_v2.py's")
        return 2
    if args.command == "power" and args.source == "selection" and not study.tunes_lr:
        _say(f"error: {args.study} chooses no learning rate ([lr]): it has no selection runs "
             "to plan from; use the claims results (--source claims)")
        return 2
    if args.command == "power" and not (0 < args.power < 1 and 0 < args.alpha < 1):
        _say(f"error: --power and --alpha must lie in (0, 1), got {args.power:g} and "
             f"{args.alpha:g}")
        return 2
    if study.kind == "ladder":
        # imported here, not at the top: the ladder reads experiments/ when imported, which
        # only a checkout of the project has
        ladder = importlib.import_module("asyncpp.study.ladder")
        if args.command == "report":
            print(ladder.report_tier(study.path))
            return 0
        if getattr(args, "lanes", 1) < 1:
            _say("error: --lanes must be ≥ 1")
            return 2
        commands = importlib.import_module("asyncpp.study.ladder.study_commands")
        return commands.command(study.name, args.command, getattr(args, "lanes", 1), deadline)
    if args.out:
        study = dataclasses.replace(study, out=Path(args.out).resolve())
    if getattr(args, "lanes", 1) < 1 or getattr(args, "gpus_per_lane", 0) < 0:
        _say("error: --lanes must be ≥ 1 and --gpus-per-lane ≥ 0")
        return 2
    if args.command == "plan" or args.command == "status":
        lines = _plan_lines(study)
        if args.command == "status":
            lines = lines[-1:]
            for c, ch in runner.chosen_lrs(study).items():
                lines.append(f"lr of {c}: {ch['lr']:g} ({ch['rule']} over seeds {ch['seeds']})"
                             + (f"; {ch['note']}" if ch["note"] else ""))
        print("\n".join(lines))
        return 0
    if args.command == "reproduce":
        return main_reproduce(study, args.result, args.keep)
    if args.command == "power":
        rows = planning.needs(study, args.source, args.power, args.alpha)
        print(planning.table(rows, args.source, args.power, args.alpha), end="")
        return 0
    if args.command == "report":
        try:
            paths = write_report(study)
        except StudyError as e:
            _say(f"error: {e}")
            return 2
        print("\n".join(str(p) for p in paths))
        return 0
    total = runner.Outcome()
    # selection runs again after each pass: a grid whose best lr is on its edge gains a point
    phases, seen = ["selection"] * (study.lr_extend + 1) + ["claims"], set()
    for phase in phases:
        runs = (runner.selection_runs(study) if phase == "selection"
                else runner.claims_runs(study)[0])
        runs = [r for r in runs if r.result not in seen]
        seen.update(r.result for r in runs)
        if not runs:
            continue
        _say(f"{phase}: {len(runs)} run(s)")
        out = runner.execute(study, runs, lanes=args.lanes, deadline=deadline,
                             gpus_per_lane=args.gpus_per_lane, say=_say)
        total.trained += out.trained
        total.reused += out.reused
        total.skipped += out.skipped
        total.failed += out.failed
        total.left += out.left
        if out.failed or out.left:
            break
    waiting = runner.claims_runs(study)[1]
    _say(f"trained {total.trained}, reused {total.reused}, already on disk {total.skipped}"
         + (f", {total.left} left" if total.left else "")
         + (f", {len(total.failed)} failed" if total.failed else ""))
    if total.failed:
        for f in total.failed:
            _say(f"failed: {f}")
        return 1
    if total.left or waiting:
        _say(f"runs left; `{PROG} run {args.study}` continues")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
