r"""A stand-in for ``opt-180k``'s lr results, for the GPU runbook's dry run: every (optimizer,
mode) the gpu tier tunes gets the settled seed-0 grid that tables_opt's rule would reach if
the final val loss were

.. math::
    L(\eta) = 3.9 + 0.1\,\bigl|\log_2(\eta / \eta^\dagger)\bigr|,\qquad
    \eta^\dagger = c\,2^{k},

with ``c`` the ladder's centre (tables_opt.CENTRE) and ``k`` = ``--shift``: the first grid
:math:`\{c/2, c, 2c\}`, extended towards :math:`\eta^\dagger` while its best point sits on an
edge (at most tables_opt.MAX_EXTEND times, so :math:`|k| \le` MAX_EXTEND + 1). The choice the
transfer rule reads is then :math:`\eta^\dagger` (on the grid's edge when :math:`|k|` =
MAX_EXTEND + 1, which the rule accepts once the grid is at its full length).

The dry run points ``ASYNCPP_LR_TRANSFER`` (tables_opt.TRANSFER_ENV) at the folder this writes;
then it does not depend on how far the real ``experiments/opt-180k/results`` have come. It
uses a negative shift (small learning rates), so that at its few training steps the largest
lr of each of the gpu tier's first grids is the best and the grids extend past their upper
edges: the extension loop is exercised.

Usage::

    python experiments/gpu/transfer_fixture.py --out DIR [--shift -4]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from . import tables_opt as to
from .tiers import get_tier


def write(out: Path, shift: int = 0) -> dict[tuple[str, str], float]:
    """Write the fixture's result files into ``out``; returns each pair's settled choice."""
    if abs(shift) > to.MAX_EXTEND + 1:
        raise ValueError(f"--shift {shift}: a grid reaches at most 2^{to.MAX_EXTEND + 1} "
                         "times its centre")
    src = get_tier(to.SMALLEST).at(results=out)
    out.mkdir(parents=True, exist_ok=True)
    choices = {}
    for opt, mode in to.TUNED_MAIN:
        target = to.CENTRE[opt] * 2.0 ** shift
        while (choice := to.lr_choice(src, opt, mode)) is None:
            for lr in to.lr_grid(src, opt, mode):  # the unfinished points of the grid
                name = to.lr_cell_name(opt, mode, lr)
                rec = {"cell": name, "seed": 0, "status": "ok", "fixture": True,
                       "final": {"val_loss": 3.9 + 0.1 * abs(math.log2(lr / target))}}
                (out / f"{name}-seed0.json").write_text(json.dumps(rec) + "\n")
        choices[opt, mode] = to.chosen_lr(src, opt, mode)
        assert math.isclose(choice[0], target, rel_tol=1e-9), (opt, mode, choice, target)
    return choices


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the stand-in result files")
    ap.add_argument("--shift", type=int, default=0,
                    help="the choice is the ladder's centre times 2^SHIFT")
    args = ap.parse_args(argv)
    try:
        choices = write(Path(args.out), args.shift)
    except ValueError as e:
        print(f"transfer_fixture.py: {e}", file=sys.stderr)
        return 2
    print(f"transfer fixture: {len(choices)} settled grids in {args.out}, lr* = centre x "
          f"2^{args.shift}")
    return 0
