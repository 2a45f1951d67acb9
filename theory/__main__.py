"""``python -m theory``: check every proof step of every result; exit 1 if any fails.

Options: ``--latex`` also prints each result's LaTeX; ``--quiet`` prints only the summary.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from . import all_results
from .assumptions import ASSUMPTIONS, FAILED, UNCHECKED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m theory", description=__doc__)
    parser.add_argument("--latex", action="store_true", help="print the LaTeX of each result")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    failed = []
    totals: dict[str, int] = {}
    unchecked: dict[str, set] = {}
    definitions: dict[str, set] = {}
    for res in all_results():
        res.check()
        if not args.quiet:
            print(res.report())
            if args.latex:
                print(res.latex())
            print()
        for st in res.steps:
            status = st.check()
            totals[status] = totals.get(status, 0) + 1
            if status == FAILED:
                failed.append(f"{res.name}: {st.name}")
            if st.kind == "definition":
                definitions.setdefault(re.sub(r"^(block: )?\S+ ", "", st.name),
                                       set()).add(res.name)
            if st.kind in UNCHECKED:
                what = re.sub(r"^(block: )?\S+ ", "", st.name)
                unchecked.setdefault(f"{st.kind}: {what}", set()).add(res.name)
    print("standing assumptions:")
    for a in ASSUMPTIONS.values():
        print(f"  ({a.name}) {a.text}")
    print("steps taken on trust (assumption / cited / reasoning), by result:")
    for key in sorted(unchecked):
        print(f"  {key}  [{', '.join(sorted(unchecked[key]))}]")
    print("definitions (consistent with their model, not counted as verified):")
    for key in sorted(definitions):
        print(f"  {key}  [{', '.join(sorted(definitions[key]))}]")
    # numerical checks of closed forms against their float64 recursion (AD)
    from .adaptive_delay import numeric_checks
    from .ef_gamma_closed import numeric_checks as ef_gamma_certificates
    from .muon_attractors import numeric_checks as attractor_checks
    from .stability import ef_growth_checks
    for tag, checks in (("AD numeric", numeric_checks), ("EG exact", ef_gamma_certificates),
                        ("MA exact", attractor_checks), ("EF growth", ef_growth_checks)):
        for name, ok, detail in checks():
            if not args.quiet:
                print(f"  [{'ok' if ok else 'FAILED':8s}] numeric  {name}: {detail}")
            if not ok:
                failed.append(f"{tag}: {name}")
    summary = ", ".join(f"{v} {k}" for k, v in sorted(totals.items()))
    print(f"TOTAL: {summary}  ({time.perf_counter() - start:.1f} s)")
    if failed:
        print("FAILED steps:")
        for name in failed:
            print("  " + name)
        return 1
    print("all machine-checkable steps verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
