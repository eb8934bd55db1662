"""What a retriever trains and validates on, assembled from a split: training histories, a
validation holdout of items never trained on, and the items a validation beam may return."""

import dataclasses

import numpy as np

from data.splits import (
    ColdStartSplit,
    cold_start_split,
    holdout_last,
    holdout_rows,
    leave_one_out,
    validation_split,
)
from data.types import Histories, InteractionData


@dataclasses.dataclass(frozen=True)
class RetrieverData:
    """Item SIDs, training histories and a validation holdout."""

    sids: np.ndarray  # int32 [N, L+1]
    codebook_size: int  # V
    train: Histories
    valid_histories: Histories
    valid_targets: np.ndarray  # int32 [M]
    allowed: np.ndarray  # bool [N]: items a validation beam may return (the non-cold ones)


@dataclasses.dataclass(frozen=True)
class ColdStartHistories:
    """What a model of a cold-start split trains and early-stops on, by item index."""

    split: ColdStartSplit
    train: Histories  # split.train less the holdout's last items
    valid_histories: Histories  # the holdout users' training histories before their last item
    valid_targets: np.ndarray  # int32 [M]: those last items (warm, never a test interaction)


def cold_start_histories(
    ds: InteractionData, *, fraction: float, eval_users: int, seed: int, validation: bool = False
) -> ColdStartHistories:
    """The split's training histories (no cold item; each test user cut before their target)
    minus the last items of a seeded sample of `eval_users` users (>= 3 items), which validate:
    what every model of a cold-start split sees (validation=True: of the tuning split,
    data.splits.validation_split)."""
    split = (validation_split if validation else cold_start_split)(ds, fraction)
    train, valid_h, valid_t = holdout_last(split.train, max_users=eval_users, seed=seed)
    return ColdStartHistories(split, train, valid_h, valid_t)


def cold_start_examples(
    ds: InteractionData,
    sids: np.ndarray,
    *,
    codebook_size: int,
    fraction: float,
    eval_users: int,
    seed: int,
    validation: bool = False,
) -> RetrieverData:
    """Training histories without any cold-start item, minus a seeded holdout of `eval_users`
    users' last items.

    validation=True trains for the tuning protocol (data.splits.validation_split): the real cold
    items are gone and the newest remaining items play the cold set.
    """
    h = cold_start_histories(
        ds, fraction=fraction, eval_users=eval_users, seed=seed, validation=validation
    )
    return RetrieverData(
        sids=np.asarray(sids, np.int32),
        codebook_size=codebook_size,
        train=h.train,
        valid_histories=h.valid_histories,
        valid_targets=h.valid_targets,
        allowed=~h.split.cold_mask,
    )


def loo_examples(
    ds: InteractionData, sids: np.ndarray, *, codebook_size: int, eval_users: int, seed: int
) -> RetrieverData:
    """Leave-one-out (TIGER): train on all but the last two items; validate on a seeded sample of
    `eval_users` second-to-last items (never a test target); every item allowed."""
    split = leave_one_out(ds)
    rows = holdout_rows(len(split.valid_targets), eval_users, seed)
    return RetrieverData(
        sids=np.asarray(sids, np.int32),
        codebook_size=codebook_size,
        train=split.train,
        valid_histories=Histories.from_lists([split.valid_histories[int(i)] for i in rows]),
        valid_targets=split.valid_targets[rows].astype(np.int32),
        allowed=np.ones(len(sids), bool),
    )
