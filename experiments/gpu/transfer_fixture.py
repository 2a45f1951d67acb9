"""A stand-in folder of settled lr results for the runbook's dry run
(``asyncpp.study.ladder.gpu_transfer_fixture``). Usage: ``python
experiments/gpu/transfer_fixture.py --help``."""

import sys

from asyncpp.study.ladder.gpu_transfer_fixture import main

if __name__ == "__main__":
    sys.exit(main())
