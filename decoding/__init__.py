"""STATIC index, constraint interface, baselines, beam scores and one jit-compiled beam search."""

from decoding.beam_search import BeamResult, beam_search
from decoding.constraints import Candidates, Constraint, StaticConstraint, Unconstrained
from decoding.scoring import LevelScoring, prefix_log_prior, prior_correction
from decoding.static_index import Capacity, StaticIndex

__all__ = [
    "BeamResult",
    "Candidates",
    "Capacity",
    "Constraint",
    "LevelScoring",
    "StaticConstraint",
    "StaticIndex",
    "Unconstrained",
    "beam_search",
    "prefix_log_prior",
    "prior_correction",
]
