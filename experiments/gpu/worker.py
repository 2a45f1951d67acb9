"""One GPU worker of the runbook (``asyncpp.study.ladder.gpu_worker``). Usage: ``python
experiments/gpu/worker.py --help``."""

import sys

from asyncpp.study.ladder.gpu_worker import entry

if __name__ == "__main__":
    sys.exit(entry())
