"""STATIC index, constraint interface, baselines, beam scores, one jit-compiled beam search, and
the hash set that verifies drafted SIDs; `make_decoder` and `make_label_decoder` are the entry
points every decode goes through."""

from decoding.baselines import CpuTrie, HashBitmap, PPVApprox, PPVExact
from decoding.beam_search import BeamResult, beam_search
from decoding.constraints import Candidates, Constraint, StaticConstraint, Unconstrained, contains
from decoding.decoder import make_decoder
from decoding.hashset import (
    HashSet,
    HashVerify,
    SortedKeys,
    hash_contains,
    sid_words,
    sorted_contains,
)
from decoding.label_decoder import LabelResult, make_label_decoder
from decoding.label_index import LabelCapacity, LabelIndex, subset_words
from decoding.label_tokens import LabelTokens, tokenize_labels
from decoding.labels import LabelConstraint, LabelState
from decoding.live import (
    LiveCapacity,
    LiveCatalog,
    LiveConstraint,
    LiveIndex,
    add_items,
    set_enabled,
    set_membership,
    set_times,
)
from decoding.prefix_prior import PrefixPrior, PrefixTable
from decoding.scoring import LevelScoring, prefix_log_prior, prior_correction
from decoding.static_index import Capacity, StaticIndex

__all__ = [
    "BeamResult",
    "Candidates",
    "Capacity",
    "Constraint",
    "CpuTrie",
    "HashBitmap",
    "HashSet",
    "HashVerify",
    "LabelCapacity",
    "LabelConstraint",
    "LabelIndex",
    "LabelResult",
    "LabelState",
    "LabelTokens",
    "LevelScoring",
    "LiveCapacity",
    "LiveCatalog",
    "LiveConstraint",
    "LiveIndex",
    "PPVApprox",
    "PPVExact",
    "PrefixPrior",
    "PrefixTable",
    "SortedKeys",
    "StaticConstraint",
    "StaticIndex",
    "Unconstrained",
    "add_items",
    "beam_search",
    "contains",
    "hash_contains",
    "make_decoder",
    "make_label_decoder",
    "prefix_log_prior",
    "prior_correction",
    "set_enabled",
    "set_membership",
    "set_times",
    "sid_words",
    "sorted_contains",
    "subset_words",
    "tokenize_labels",
]
