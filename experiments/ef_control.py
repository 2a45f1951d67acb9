"""The EF-without-delay control at ``opt-180k`` (``asyncpp.study.ladder.ef_control``; the
pre-registration: ``experiments/opt-180k/ef-control.md``). Usage:
``python experiments/ef_control.py --help``."""

import sys

from asyncpp.study.ladder.ef_control import main

if __name__ == "__main__":
    sys.exit(main())
