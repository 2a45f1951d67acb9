"""The option names shared by the configuration and the library (no torch here, so the
configuration can validate before anything heavy is imported)."""

OPTIMIZERS = ("adamw", "muon", "soap", "adan", "lion", "mars")
"""``build_optimizer`` names, the values of ``optimizer.name``."""
CORRECTIONS = ("none", "ef", "taylor", "nesterov")
"""``DelayedOptimizer`` corrections, the values of ``delay.correction``."""
FORMULATIONS = ("gradient", "update")
"""``DelayedOptimizer`` delay formulations, the values of ``delay.formulation``."""

MUON_ADAMW_LR = 3e-3
"""Muon's default learning rate of its AdamW side (embeddings, head, norms): the library's
``Muon(adamw_lr=...)`` and the CLI's ``optimizer.adamw_lr``."""
MUON_NS_DTYPE = "auto"
"""Muon's default Newton–Schulz precision: ``auto`` is bfloat16 on a CUDA device and float32
elsewhere (bfloat16 matmuls on a CPU are slow and no more stable), in the library and the CLI."""
