"""What the cold-start validation analyses share (imported by the scripts beside it): a
`cold-val` retriever with its validation users, token inputs, STATIC over the pseudo-cold items
and the run's cold-start beam scores, loaded as `genret eval-cold-start --validation` loads them;
and the Recall@1 / Recall@10 / NDCG@10 line they print."""

import dataclasses

import numpy as np

from data.splits import ColdStartSplit, validation_split
from data.types import InteractionData
from decoding import LevelScoring, StaticConstraint, StaticIndex
from experiments.evaluation import metrics
from experiments.pipeline.artifacts import load_retriever
from experiments.config import Config, load_json
from experiments.pipeline.layout import RunLayout, Split
from experiments.evaluation.retrieval import cold_scoring, evaluated_inputs, load_inputs
from seqmodel.state import Retriever


@dataclasses.dataclass(frozen=True)
class ColdVal:
    cfg: Config
    layout: RunLayout
    ds: InteractionData
    sids: np.ndarray
    model: Retriever
    split: ColdStartSplit
    targets: np.ndarray
    inputs: np.ndarray
    static: StaticConstraint  # over the pseudo-cold items' SIDs
    scoring: LevelScoring | None  # the run's cold-start beam scores


def load(workdir: str, fraction: float) -> ColdVal:
    layout = RunLayout(workdir)
    cfg = load_json(layout.config)
    ds, sids = load_inputs(cfg, layout)
    which = Split("cold-val", fraction)
    model = load_retriever(layout, which)
    split = validation_split(ds, fraction)
    V = model.space.codebook_size
    targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, layout.retriever(which))
    index = StaticIndex.build(
        sids[split.cold_items], vocab_size=V, dense_levels=cfg.decode.dense_levels
    )
    scoring = cold_scoring(cfg.eval, split.train, sids, V)
    return ColdVal(
        cfg, layout, ds, sids, model, split, targets, inputs, StaticConstraint(index), scoring
    )


def fmt(pred: np.ndarray, targets: np.ndarray) -> str:
    """Recall@1 / Recall@10 / NDCG@10 in percent."""
    m = metrics.ranking_metrics(pred, targets, ks=(1, 10), ndcg_ks=(10,))
    return " / ".join(f"{100 * m[k]:.2f}" for k in ("recall@1", "recall@10", "ndcg@10"))
