"""Re-run committed results at their recorded commit and compare
(``asyncpp.study.ladder.reproduce``). Usage: ``python experiments/reproduce.py --help``."""

import sys

from asyncpp.study.ladder.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
