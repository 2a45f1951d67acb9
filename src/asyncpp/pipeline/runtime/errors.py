"""The one error a pipeline run raises when a peer fails."""


class PipelineError(RuntimeError):
    """A peer of this rank failed, stalled past the timeout, or broke the protocol."""
