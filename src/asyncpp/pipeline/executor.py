"""Where the executor lived before the runtime became a package: the same names, re-exported
from :mod:`asyncpp.pipeline.runtime` (the executor, the stage context, the transport and the
update queue)."""

from .runtime.context import alias as _alias
from .runtime.errors import PipelineError
from .runtime.executor import (
    HANDLERS,
    PipelineExecutor,
    StepOutput,
    _compare_across_ranks,
    _digest,
    stage_delay,
)

__all__ = ["HANDLERS", "PipelineError", "PipelineExecutor", "StepOutput", "stage_delay"]
__all__ += ["_alias", "_compare_across_ranks", "_digest"]
