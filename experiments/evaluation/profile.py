"""The user's text profile, the content neighbour's query (`ContentProfile`). Kept apart from
`baselines` so that config validation can check it without importing the evaluation stack."""

import dataclasses

from data.errors import ArgumentError

CONTENT_RECENT = 3  # the user's last items whose mean embedding is the query


@dataclasses.dataclass(frozen=True)
class ContentProfile:
    """A user's text profile, the content neighbour's query: the weighted mean of the unit
    embeddings of the history's last `recent` items, the item j places from the end weighted
    decay**j (decay 1: the plain mean)."""

    recent: int = CONTENT_RECENT
    decay: float = 1.0

    def __post_init__(self):
        if self.recent < 1 or not 0.0 < self.decay <= 1.0:  # NaN and inf fail it too
            raise ArgumentError(
                f"eval.cold_content_recent={self.recent}, eval.cold_content_decay={self.decay}: "
                "the content profile needs recent >= 1 and decay in (0, 1]"
            )

    @classmethod
    def of(cls, eval_cfg) -> "ContentProfile":
        """The profile of eval.cold_content_recent and eval.cold_content_decay."""
        return cls(eval_cfg.cold_content_recent, eval_cfg.cold_content_decay)


PLAIN_PROFILE = ContentProfile()  # the plain mean of the last three items
