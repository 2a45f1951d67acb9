"""asyncpp: asynchronous pipeline-parallel pretraining with Muon, one-step delay and Error
Feedback — theory, verification and a training engine in one code base."""

__version__ = "0.1.0"
