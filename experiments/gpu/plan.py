"""The GPU tier's shape and run length for a corpus (``asyncpp.study.ladder.gpu_plan``). Usage:
``python experiments/gpu/plan.py --help``."""

import sys

from asyncpp.study.ladder.gpu_plan import main

if __name__ == "__main__":
    sys.exit(main())
