"""The option names shared by the configuration and the library (no torch here, so the
configuration can validate before anything heavy is imported)."""

OPTIMIZERS = ("adamw", "muon", "soap", "adan", "lion", "mars")
"""``build_optimizer`` names, the values of ``optimizer.name``."""
CORRECTIONS = ("none", "ef", "taylor", "nesterov")
"""``DelayedOptimizer`` corrections, the values of ``delay.correction``."""
FORMULATIONS = ("gradient", "update")
"""``DelayedOptimizer`` delay formulations, the values of ``delay.formulation``."""
