"""The pipeline runtime: the executor (an interpreter of schedule programs), the per-stage
context, the stage (its computation), the transport and the update queue."""

from .context import StageContext
from .errors import PipelineError
from .executor import HANDLERS, PipelineExecutor, StepOutput, stage_delay
from .stage import InFlight, Stage
from .transport import Transport
from .updates import UpdateQueue

__all__ = ["HANDLERS", "InFlight", "PipelineError", "PipelineExecutor", "Stage", "StageContext",
           "StepOutput", "Transport", "UpdateQueue", "stage_delay"]
