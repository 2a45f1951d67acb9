"""Optimizers: Muon (batched Newton–Schulz) and the baselines, behind ``build_optimizer``."""

from .build import OPTIMIZERS, build_optimizer, split_muon_params
from .clip import clip_coefficient, scale_, squared_norm
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
    "clip_coefficient",
    "newton_schulz",
    "scale_",
    "singular_value_band",
    "split_muon_params",
    "squared_norm",
]
