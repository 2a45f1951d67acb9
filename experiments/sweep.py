"""The resumable runner of the reproduction's tiers (``asyncpp.study.ladder.sweep``). Usage:
``python experiments/sweep.py --help``."""

import sys

from asyncpp.study.ladder.sweep import entry

if __name__ == "__main__":
    sys.exit(entry())
