"""Where the executor lived before the runtime became a package: the same public names,
re-exported from :mod:`asyncpp.pipeline.runtime` (the executor, the stage context, the
transport and the update queue)."""

from .runtime.errors import PipelineError
from .runtime.executor import (
    HANDLERS,
    ExecutorOptions,
    PipelineExecutor,
    StepOutput,
    stage_delay,
)

__all__ = ["ExecutorOptions", "HANDLERS", "PipelineError", "PipelineExecutor", "StepOutput",
           "stage_delay"]
