"""Every tier's tables.md and figures, and the README numbers (``asyncpp.study.ladder.report``).
Usage: ``python experiments/report.py --help``."""

import sys

from asyncpp.study.ladder.report import main

if __name__ == "__main__":
    sys.exit(main())
