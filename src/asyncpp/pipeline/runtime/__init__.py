"""The pipeline runtime: the executor (an interpreter of schedule programs), the per-stage
context, the stage (its computation), the transport, the update queue and the clock of where
each stage's time goes."""

from .context import StageContext
from .errors import PipelineError
from .executor import HANDLERS, ExecutorOptions, PipelineExecutor, StepOutput, stage_delay
from .stage import InFlight, Stage
from .stage_clock import StageClock, StageTimes
from .transport import Transport
from .updates import UpdateQueue

__all__ = ["HANDLERS", "ExecutorOptions", "InFlight", "PipelineError", "PipelineExecutor",
           "Stage", "StageClock", "StageContext", "StageTimes", "StepOutput", "Transport",
           "UpdateQueue", "stage_delay"]
