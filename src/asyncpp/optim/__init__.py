"""Optimizers: Muon (batched Newton–Schulz) and the baselines, behind ``build_optimizer``."""

from .build import OPTIMIZERS, build_optimizer, split_muon_params
from .distributed_muon import DistributedMuon
from .mars import MARS
from .muon import Muon, adjusted_lr
from .newton_schulz import newton_schulz, singular_value_band

__all__ = [
    "DistributedMuon",
    "MARS",
    "OPTIMIZERS",
    "Muon",
    "adjusted_lr",
    "build_optimizer",
    "newton_schulz",
    "singular_value_band",
    "split_muon_params",
]
