"""STATIC index, constraint interface, baselines, beam scores and one jit-compiled beam search."""

from decoding.baselines import CpuTrie, HashBitmap, PPVApprox, PPVExact
from decoding.beam_search import BeamResult, beam_search
from decoding.constraints import Candidates, Constraint, StaticConstraint, Unconstrained, contains
from decoding.decoder import make_decoder
from decoding.scoring import LevelScoring, prefix_log_prior, prior_correction
from decoding.static_index import Capacity, StaticIndex

__all__ = [
    "BeamResult",
    "Candidates",
    "Capacity",
    "Constraint",
    "CpuTrie",
    "HashBitmap",
    "LevelScoring",
    "PPVApprox",
    "PPVExact",
    "StaticConstraint",
    "StaticIndex",
    "Unconstrained",
    "beam_search",
    "contains",
    "make_decoder",
    "prefix_log_prior",
    "prior_correction",
]
