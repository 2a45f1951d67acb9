"""The EF-without-delay control at ``opt-180k`` (``asyncpp.study.ladder.ef_control``; the
pre-registration: ``experiments/opt-180k/ef-control.md``). Usage:
``python experiments/ef_control.py --help`` (the lane), ``python experiments/ef_control.py
--report`` (``ef-control-report.md`` and its numbers, from the runs on disk)."""

import sys

from asyncpp.study.ladder import ef_control, ef_control_report

if __name__ == "__main__":
    if sys.argv[1:] == ["--report"]:
        sys.exit(ef_control_report.main())
    sys.exit(ef_control.main())
