"""How far the item text alone goes on a cold-start split: the content neighbour's Recall@1 and
Recall@10 over the cold set under other text views (TF-IDF variants, optionally MiniLM), each
alone and fused with the preset's view (the sum of the two cosines, each standardized per user),
and with a behavioural term (the text similarity of each cold item to the warm items that the
training co-occurrence predicts after the user's recent items).

Every view keeps the user's text profile of the work directory's config (eval.cold_content_recent
and _decay). Reads the prepared data only; the cold-val split by default (`--test`: the test
split), so no test target is read unless asked.
Usage: python docs/scripts/cold_text_views.py WORKDIR FRACTION [--test] [--minilm]
"""

import argparse
import dataclasses
import sys

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer

from data.errors import ArtifactError, GenretError
from data.splits import check_fraction, cold_start_split, validation_split
from experiments import config as config_lib
from experiments.evaluation.baselines import content_queries, cosines
from experiments.evaluation.profile import ContentProfile
from experiments.pipeline.artifacts import load_dataset
from experiments.pipeline.layout import RunLayout
from rqvae.cooc import cooccurrence_counts
from rqvae.embed import tfidf_rows

PRESET = "the preset's TF-IDF"  # rqvae.embed.tfidf_rows: word 1-2 grams, sublinear tf
# The other views: name -> TfidfVectorizer arguments.
VIEWS = {
    "word 1-grams": dict(min_df=2, sublinear_tf=True),
    "word 1-3 grams": dict(ngram_range=(1, 3), min_df=2, sublinear_tf=True),
    "word 1-2 grams, min_df 1": dict(ngram_range=(1, 2), min_df=1, sublinear_tf=True),
    "word 1-2 grams, binary": dict(ngram_range=(1, 2), min_df=2, binary=True),
    "character 3-5 grams": dict(
        analyzer="char_wb", ngram_range=(3, 5), min_df=2, sublinear_tf=True
    ),
}
FUSION_WEIGHTS = (0.3, 1.0)


def standardized(s: np.ndarray) -> np.ndarray:
    return (s - s.mean(axis=1, keepdims=True)) / (s.std(axis=1, keepdims=True) + 1e-9)


def recalls(scores: np.ndarray, cands: np.ndarray, targets: np.ndarray) -> str:
    """Recall@1 / Recall@10 (%) of each row's top cold items; ties go to the lower column."""
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    hit = cands[top] == targets[:, None]
    return f"{100 * hit[:, 0].mean():.2f} / {100 * hit.any(axis=1).mean():.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("fraction", type=float)
    ap.add_argument("--test", action="store_true", help="the test split (default: cold-val)")
    ap.add_argument("--minilm", action="store_true", help="add MiniLM (the `embed` extra)")
    args = ap.parse_args()
    fraction = check_fraction(args.fraction, "FRACTION")
    layout = RunLayout(args.workdir)
    cfg = config_lib.load_json(
        layout.require(layout.config, f"genret prepare --workdir {layout.root}")
    )
    ds = load_dataset(layout)
    split = (cold_start_split if args.test else validation_split)(ds, fraction)
    profile = ContentProfile.of(cfg.eval)
    texts = [t or "" for t in ds.catalog.texts]
    cands, targets = split.cold_items, split.test_targets
    histories = split.test_histories

    def neighbour(x) -> np.ndarray:
        unit, queries = content_queries(x, histories, profile)
        return cosines(queries, unit[cands].T)

    preset_rows = tfidf_rows(texts, cfg.rqvae, cache_dir=layout.embeddings)
    if preset_rows is None:
        raise ArtifactError(f"{layout.prepared}: no item text has a word TF-IDF keeps")
    unit, queries = content_queries(preset_rows, histories, profile)
    to_cold = cosines(unit, unit[cands].T)  # [N, C]: every item's cosine to each cold item
    scores = {PRESET: cosines(queries, unit[cands].T)}
    for name, kw in VIEWS.items():
        scores[name] = neighbour(TfidfVectorizer(dtype=np.float32, **kw).fit_transform(texts))
    if args.minilm:  # cached in WORKDIR/embeddings, as the tokenizer stage caches it
        from rqvae.embed import embed_texts  # here: torch loads only with --minilm

        minilm = dataclasses.replace(cfg.rqvae, embedder="minilm")
        scores["MiniLM"] = neighbour(embed_texts(texts, minilm, cache_dir=layout.embeddings))
    # Behaviour: p(next | item) from pairs one or two places apart in the training histories,
    # averaged over the user's profile, then mapped onto the cold items by the preset's cosines.
    counts = cooccurrence_counts(split.train, len(texts), 2).tocsr().astype(np.float64)
    counts = sp.diags(1.0 / np.maximum(np.asarray(counts.sum(axis=1)).ravel(), 1e-12)) @ counts
    _, weights = content_queries(sp.identity(len(texts), format="csr"), histories, profile)
    scores["co-occurrence -> text"] = weights @ (counts @ to_cold)

    print(f"{len(targets)} users, {len(cands)} cold items, {'test' if args.test else 'cold-val'}")
    print(
        "| view | alone R@1 / R@10 | " + " | ".join(f"+ {w} x view" for w in FUSION_WEIGHTS) + " |"
    )
    print("|---|---|" + "---|" * len(FUSION_WEIGHTS))
    base = standardized(scores[PRESET])
    for name, s in scores.items():
        cells = [recalls(s, cands, targets)]
        if name != PRESET:
            z = standardized(s)
            cells += [recalls(base + w * z, cands, targets) for w in FUSION_WEIGHTS]
        else:
            cells += [""] * len(FUSION_WEIGHTS)
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    try:
        main()
    except GenretError as e:  # bad input: one line, no traceback
        sys.exit(f"cold_text_views: {e}")
