"""The chaos floor of an ``opt-180k`` claims cell (``asyncpp.study.ladder.chaos``). Usage:
``python experiments/chaos.py --help``."""

import sys

from asyncpp.study.ladder.chaos import main

if __name__ == "__main__":
    sys.exit(main())
