"""How far the item text alone goes on a cold-start split: the content neighbour's Recall@1 and
Recall@10 over the cold set under other text views (TF-IDF variants, optionally MiniLM), each
alone and fused with the preset's view (the sum of the two cosines, each standardized per user),
and with a behavioural term (the text similarity of each cold item to the warm items that the
training co-occurrence predicts after the user's recent items). Two more rows keep the preset's
TF-IDF rows and change how they are used: the best cosine to any one of the profile's items (the
item j places from the end weighted decay^j) in place of the cosine to their mean, and a weight
per term learned on the split's training histories (`learned_term_weights`: the profile before
each target among the newest tenth of the training items scores those items, the user's own
items left out, by a softmax cross-entropy).

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
from data.splits import (
    ColdStartSplit,
    check_fraction,
    cold_start_split,
    first_times,
    validation_split,
)
from data.types import Histories
from experiments import config as config_lib
from experiments.evaluation.baselines import (
    content_queries,
    cosines,
    places_from_end,
    recent_items,
)
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
# learned_term_weights' training, picked among five settings on Beauty's 2% cold-val split: the
# newest tenth of the training items as targets, 4 epochs of Adam at 1e-3 over batches of 256,
# L2 1e-3 on the log-weights, the softmax temperature learned from 0.1.
NEWEST = 0.1


def standardized(s: np.ndarray) -> np.ndarray:
    return (s - s.mean(axis=1, keepdims=True)) / (s.std(axis=1, keepdims=True) + 1e-9)


def recalls(scores: np.ndarray, cands: np.ndarray, targets: np.ndarray) -> str:
    """Recall@1 / Recall@10 (%) of each row's top cold items; ties go to the lower column."""
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    hit = cands[top] == targets[:, None]
    return f"{100 * hit[:, 0].mean():.2f} / {100 * hit.any(axis=1).mean():.2f}"


def best_item_cosine(unit, histories, profile, cands) -> np.ndarray:
    """[U, C]: each cold item's best cosine to one of the profile's items, the item j places from
    the end weighted profile.decay**j (`unit`: unit TF-IDF rows, `content_queries`)."""
    rows, items, take = recent_items(histories, profile.recent)
    weight = profile.decay ** places_from_end(take)
    per_item = cosines(unit[items], unit[cands].T) * weight[:, None]
    out = np.full((len(histories), len(cands)), -np.inf)
    np.maximum.at(out, rows, per_item)
    return out


def term_weight_loss(params, Q, XT, targets, own, l2: float):
    """(mean softmax cross-entropy + l2 x |a|^2 / 2, its gradient) of `learned_term_weights`'
    model at params = (a_1..a_V, log tau), over a batch: Q [B, V] the profiles (sparse), XT
    [V, I] the candidate items' unit rows, `targets` [B] their columns, `own` (row, column)
    pairs masked out (the prefix's own items)."""
    V = Q.shape[1]
    w, tau = np.exp(params[:V]), np.exp(params[V])
    S = cosines(Q @ sp.diags(w), XT)
    logits = S / tau
    logits[own] = -np.inf
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    P /= P.sum(axis=1, keepdims=True)
    rows = np.arange(len(targets))
    reg = 0.5 * l2 * float(params[:V] @ params[:V])
    loss = -np.log(np.maximum(P[rows, targets], 1e-300)).mean() + reg
    P[rows, targets] -= 1.0  # d loss / d logits, times the batch size
    coo = Q.tocoo()
    M = np.asarray(XT @ P.T).T  # [B, V]: sum_i (p_i - y_i) x_i
    grad = np.empty_like(params)
    grad[:V] = np.bincount(coo.col, coo.data * M[coo.row, coo.col], minlength=V) * w / tau
    grad[V] = -(P * S).sum() / tau
    grad /= len(targets)
    grad[:V] += l2 * params[:V]
    return loss, grad


def learned_term_weights(
    rows, train: Histories, profile, *, epochs=4, lr=1e-3, l2=1e-3, batch=256, seed=0
) -> tuple[np.ndarray, list[float]]:
    """(a weight per TF-IDF term, the mean training loss before and after each epoch).

    A training example is a history prefix of `train` and its next item, where that item is
    among the newest NEWEST of the items `train` holds (by first interaction) and not in the
    prefix. Its logits over those items are sum_t w_t q_t x_t / tau (q: the prefix's text
    profile, x: the item's unit row), the prefix's own items masked; w = exp(a) and tau are
    learned by Adam on `term_weight_loss`. All weights are 1 at epochs=0."""
    first = first_times(train, rows.shape[0])
    seen = np.unique(train.items)
    by_time = seen[np.argsort(first[seen], kind="stable")]
    newest = np.sort(by_time[-max(1, int(NEWEST * len(seen))) :])
    col = np.full(rows.shape[0], -1)
    col[newest] = np.arange(len(newest))
    prefixes, targets = [], []
    for u in range(len(train)):
        h = train[u]
        for t in range(1, len(h)):
            if col[h[t]] >= 0 and h[t] not in h[:t]:
                prefixes.append(h[max(0, t - profile.recent) : t])
                targets.append(col[h[t]])
    V = rows.shape[1]
    if not targets:
        return np.ones(V), []
    pre = Histories.from_lists(prefixes)
    flat, offsets = pre.items, pre.offsets
    unit, Q = content_queries(rows, pre, profile)
    Q, XT, y = Q.tocsr(), unit[newest].T.tocsr(), np.asarray(targets)

    def loss_at(idx, params):
        r = np.repeat(np.arange(len(idx)), offsets[idx + 1] - offsets[idx])
        c = col[np.concatenate([flat[offsets[i] : offsets[i + 1]] for i in idx])]
        return term_weight_loss(params, Q[idx], XT, y[idx], (r[c >= 0], c[c >= 0]), l2)

    def mean_loss(params):
        parts = np.array_split(np.arange(len(y)), max(1, len(y) // 2048))
        return float(sum(loss_at(i, params)[0] * len(i) for i in parts) / len(y))

    params = np.zeros(V + 1)  # log-weights, then log tau
    params[V] = np.log(0.1)
    m, v = np.zeros_like(params), np.zeros_like(params)
    rng = np.random.default_rng(seed)
    steps, losses = 0, [mean_loss(params)]
    for _ in range(epochs):
        order = rng.permutation(len(y))
        for start in range(0, len(order), batch):
            _, g = loss_at(order[start : start + batch], params)
            steps += 1
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            params -= lr * (m / (1 - 0.9**steps)) / (np.sqrt(v / (1 - 0.999**steps)) + 1e-8)
        losses.append(mean_loss(params))
    return np.exp(params[:V]), losses


@dataclasses.dataclass(frozen=True)
class ColdText:
    """A prepared work directory's cold-start split and the item text it is ranked by."""

    cfg: config_lib.Config
    layout: RunLayout
    split: ColdStartSplit
    profile: ContentProfile  # the config's user text profile (eval.cold_content_*)
    texts: list[str]
    rows: sp.spmatrix  # the preset's TF-IDF rows (rqvae.embed.tfidf_rows)


def load_cold_text(workdir: str, fraction: float, test: bool) -> ColdText:
    """The cold-val split of `workdir` at `fraction` (`test`: the test split) and its text; bad
    input raises a GenretError that names the argument or artifact."""
    fraction = check_fraction(fraction, "FRACTION")
    layout = RunLayout(workdir)
    cfg = config_lib.load_json(
        layout.require(layout.config, f"genret prepare --workdir {layout.root}")
    )
    ds = load_dataset(layout)
    split = (cold_start_split if test else validation_split)(ds, fraction)
    texts = [t or "" for t in ds.catalog.texts]
    rows = tfidf_rows(texts, cfg.rqvae, cache_dir=layout.embeddings)
    if rows is None:
        raise ArtifactError(f"{layout.prepared}: no item text has a word TF-IDF keeps")
    return ColdText(cfg, layout, split, ContentProfile.of(cfg.eval), texts, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("fraction", type=float)
    ap.add_argument("--test", action="store_true", help="the test split (default: cold-val)")
    ap.add_argument("--minilm", action="store_true", help="add MiniLM (the `embed` extra)")
    args = ap.parse_args()
    data = load_cold_text(args.workdir, args.fraction, args.test)
    split, profile, texts, preset_rows = data.split, data.profile, data.texts, data.rows
    cands, targets = split.cold_items, split.test_targets
    histories = split.test_histories

    def neighbour(x) -> np.ndarray:
        unit, queries = content_queries(x, histories, profile)
        return cosines(queries, unit[cands].T)

    unit, queries = content_queries(preset_rows, histories, profile)
    to_cold = cosines(unit, unit[cands].T)  # [N, C]: every item's cosine to each cold item
    scores = {PRESET: cosines(queries, unit[cands].T)}
    scores["the preset's TF-IDF, best item"] = best_item_cosine(unit, histories, profile, cands)
    weights, _ = learned_term_weights(preset_rows, split.train, profile)
    scores["the preset's TF-IDF, learned term weights"] = cosines(
        queries @ sp.diags(weights), unit[cands].T
    )
    for name, kw in VIEWS.items():
        scores[name] = neighbour(TfidfVectorizer(dtype=np.float32, **kw).fit_transform(texts))
    if args.minilm:  # cached in WORKDIR/embeddings, as the tokenizer stage caches it
        from rqvae.embed import embed_texts  # here: torch loads only with --minilm

        minilm = dataclasses.replace(data.cfg.rqvae, embedder="minilm")
        scores["MiniLM"] = neighbour(embed_texts(texts, minilm, cache_dir=data.layout.embeddings))
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
