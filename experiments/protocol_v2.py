"""Protocol v2's inputs and seed counts at ``opt-180k``
(``asyncpp.study.ladder.protocol_v2``). Usage: ``python experiments/protocol_v2.py --help``."""

import sys

from asyncpp.study.ladder.protocol_v2 import main

if __name__ == "__main__":
    sys.exit(main())
