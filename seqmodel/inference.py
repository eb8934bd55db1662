"""A trained retriever at work: loading its best checkpoint, its decoders (one model or an
ensemble, on `decoding.make_decoder`), and validation recall; parameters are always arguments of
the compiled programs."""

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from jaxtyping import PyTree

from data.errors import ArtifactError
from data.pipeline import padded_batches
from data.typed_json import from_dict
from decoding import (
    BeamResult,
    Constraint,
    LevelScoring,
    PrefixPrior,
    PrefixTable,
    make_decoder,
)
from seqmodel import sharding
from seqmodel.checkpoint import Checkpoints
from seqmodel.config import ENSEMBLE_RULES, SeqModelConfig
from seqmodel.files import CHECKPOINTS_DIR, MODEL_FILE
from seqmodel.state import Retriever, abstract_train_state, eval_params
from seqmodel.tokens import TokenSpace


@dataclasses.dataclass(frozen=True)
class Retrieval:
    """A `decoding.make_decoder` decoder with its parameters bound: `run(tokens [B, T])`.

    `decoder(params, tokens, *, constraint=None, scoring=None)` is the decoder itself (e.g. for
    a training loop's new parameters); `params` are the bound ones, on the device.
    """

    decoder: Callable[..., BeamResult]
    params: PyTree

    def __call__(
        self,
        tokens: Any,
        *,
        constraint: Constraint | None = None,
        scoring: LevelScoring | None = None,
    ) -> BeamResult:
        """Beams of `tokens` [B, T] (host or device); `constraint` and `scoring` replace the
        decoder's own for this call (None: its own)."""
        if not isinstance(tokens, jax.Array):
            tokens = jax.device_put(np.asarray(tokens))
        return self.decoder(self.params, tokens, constraint=constraint, scoring=scoring)


def _model_fns(
    graphdef: nnx.GraphDef, item_rank: float = 0.0
) -> tuple[Callable, Callable, Callable | None]:
    """(prefill_fn, step_fn, final_fn) of `make_decoder` over one retriever's parameters;
    final_fn is None unless `item_rank` > 0 (seqmodel.item_softmax_rank: the prefill then also
    returns the backbone state as the context, and final_fn scores each beam's item by it)."""

    def prefill(params, tokens):
        lp, s = nnx.merge(graphdef, params).prefill(tokens)
        return (lp, s, s) if item_rank else (lp, s)

    def step(params, codes, level, cache, *context):
        return nnx.merge(graphdef, params).step(codes, level, cache)

    def final(params, codes, state):
        return item_rank * nnx.merge(graphdef, params).item_scores(state, codes)

    return prefill, step, (final if item_rank else None)


def item_rank_of(cfg: SeqModelConfig) -> float:
    """The weight of the item query's score in a retriever's beam ranking (seqmodel.item_softmax,
    item_softmax_rank); 0 for a retriever without the item softmax."""
    return cfg.item_softmax_rank if cfg.item_softmax else 0.0


def _ensemble_fns(graphdefs: tuple, rule: str) -> tuple[Callable, Callable]:
    """(prefill_fn, step_fn) of `make_decoder` over a tuple of retrievers' parameters; see
    `ensemble_decoder` for the rules."""

    def mean_log_probs(parts):
        return jax.nn.log_softmax(sum(parts) / len(parts), axis=-1)

    def mixture(parts, prefix_lp):
        """(the level's increment [..., V], each member's log-probs [..., M, V]) from the members'
        outputs and their log P_i(prefix) [..., M]."""
        lp = jax.nn.log_softmax(jnp.stack(parts, axis=-2), axis=-1)
        joint = jax.nn.logsumexp(prefix_lp[..., None] + lp, axis=-2)
        return joint - jax.nn.logsumexp(prefix_lp, axis=-1)[..., None], lp

    def members(params):
        return [nnx.merge(g, p) for g, p in zip(graphdefs, params, strict=True)]

    def prefill(params, tokens):
        prefilled = [m.prefill(tokens) for m in members(params)]
        caches = tuple(c for _, c in prefilled)
        parts = [lp for lp, _ in prefilled]
        if rule == "product":
            return mean_log_probs(parts), caches
        # The cache also carries, per beam, each member's log P_i(prefix) [M] and its last
        # level's log-probs [M, V], so the code chosen there can be added at the next step.
        prefix_lp = jnp.zeros((tokens.shape[0], len(parts)), jnp.float32)
        first, lp = mixture(parts, prefix_lp)
        return first, (caches, prefix_lp, lp)

    def step(params, codes, level, carried):
        if rule == "product":
            outs = [m.step(codes, level, c) for m, c in zip(members(params), carried, strict=True)]
            return mean_log_probs([o[0] for o in outs]), tuple(o[1] for o in outs)
        caches, prefix_lp, lp = carried
        # The cache was reordered with the beams, so lp[:, k] is beam k's parent's last level:
        # the code just chosen extends that parent's prefix.
        idx = jnp.broadcast_to(codes[..., None, None], (*lp.shape[:-1], 1))
        prefix_lp = prefix_lp + jnp.take_along_axis(lp, idx, axis=-1)[..., 0]
        outs = [m.step(codes, level, c) for m, c in zip(members(params), caches, strict=True)]
        inc, lp = mixture([o[0] for o in outs], prefix_lp)
        return inc, (tuple(o[1] for o in outs), prefix_lp, lp)

    return prefill, step


def retrieval_fn(
    model: Retriever | list[Retriever],
    constraint: Constraint,
    *,
    beam_size: int,
    scoring: LevelScoring | None = None,
    rule: str = "product",
    out_sharding: Any = None,
) -> Retrieval:
    """A jitted `tokens [B, T] -> BeamResult` (a `Retrieval`); beams are ranked by `scoring`
    when given (decoding.scoring), else by their joint log-probability. A list of several
    models decodes their ensemble (`ensemble_decoder`, by `rule`).

    The model's parameters are moved to the device once, here; they, the constraint and the
    scoring are arguments of the compiled function, never constants baked into it.
    """
    models = model if isinstance(model, list) else [model]
    if len(models) > 1:
        return ensemble_decoder(
            models,
            constraint,
            beam_size=beam_size,
            rule=rule,
            scoring=scoring,
            out_sharding=out_sharding,
        )
    graphdef, params = nnx.split(models[0])
    decoder = retriever_decoder(
        graphdef,
        models[0].space.num_levels,
        constraint,
        beam_size=beam_size,
        scoring=scoring,
        out_sharding=out_sharding,
        item_rank=item_rank_of(models[0].cfg),
    )
    return Retrieval(decoder, jax.device_put(params))


def retriever_decoder(
    graphdef: nnx.GraphDef,
    num_levels: int,
    constraint: Constraint,
    *,
    beam_size: int,
    scoring: LevelScoring | None = None,
    out_sharding: Any = None,
    item_rank: float = 0.0,
) -> Callable[..., BeamResult]:
    """The `make_decoder` decoder of one retriever: `decoder(params, tokens [B, T])`, for
    parameters that change between calls (a training loop's validation). `item_rank` > 0 (an
    item-level retriever with seqmodel.item_softmax; `item_rank_of`) adds that multiple of the
    item query's score to each finished beam's and ranks the beams again."""
    prefill, step, final = _model_fns(graphdef, item_rank)
    return make_decoder(
        prefill,
        step,
        constraint,
        beam_size=beam_size,
        num_levels=num_levels,
        outputs="log_probs",
        scoring=scoring,
        out_sharding=out_sharding,
        final_fn=final,
    )


def ensemble_decoder(
    models: list[Retriever],
    constraint: Constraint,
    *,
    beam_size: int,
    rule: str = "product",
    scoring: LevelScoring | None = None,
    out_sharding: Any = None,
) -> Retrieval:
    """`retrieval_fn` over the ensemble of `models` (one member too: its log-probs are then
    renormalised once more); `scoring` is a decoding.LevelScoring, or None for the ensemble's
    joint log-probability.

    rule "product": each level's log-probabilities averaged over the members and renormalised
    (a geometric mean per level). rule "mixture": a beam scores log mean_i P_i(prefix), the
    members' mean joint probability of its prefix, exactly: every beam carries each member's
    log P_i(prefix) and the level's increment is logsumexp_i(log P_i(prefix) + log p_i(code |
    prefix)) - logsumexp_i(log P_i(prefix)), which sums over the levels to the mixture's
    log-probability of the whole SID.

    The members' parameters are one tuple, put on the device once, here.
    """
    if rule not in ENSEMBLE_RULES:
        raise ValueError(f"ensemble rule {rule!r}: one of {ENSEMBLE_RULES}")
    graphdefs, params = zip(*(nnx.split(m) for m in models), strict=True)
    decoder = make_decoder(
        *_ensemble_fns(graphdefs, rule),
        constraint,
        beam_size=beam_size,
        num_levels=models[0].space.num_levels,
        outputs="log_probs",
        scoring=scoring,
        out_sharding=out_sharding,
    )
    return Retrieval(decoder, jax.device_put(params))


def prior_retrieval_fn(
    model: Retriever | list[Retriever],
    constraint: Constraint,
    table: PrefixTable,
    *,
    weight: float,
    beam_size: int,
    scoring: LevelScoring | None = None,
    rule: str = "product",
) -> Callable[[np.ndarray, np.ndarray], BeamResult]:
    """`retrieval_fn` with a per-row prior over the items of `table` (decoding.prefix_prior): a
    `(tokens [B, T], bias [B, P]) -> BeamResult`, where bias holds each row's
    log p(node | parent) (`PrefixTable.conditional_log_prior`), added `weight` times. A list of
    several models decodes their ensemble (`ensemble_decoder`, by `rule`). Each call's prior
    is the decoder's constraint for that call."""
    table.check_vocab(constraint.vocab_size)
    constraint = jax.device_put(constraint)
    run = retrieval_fn(model, constraint, beam_size=beam_size, scoring=scoring, rule=rule)
    child, w = jax.device_put((table.child, np.float32(weight)))

    def decode_with_prior(tokens: np.ndarray, bias: np.ndarray) -> BeamResult:
        if np.shape(bias) != (len(tokens), table.num_nodes):
            want = (len(tokens), table.num_nodes)
            raise ValueError(f"bias: expected {list(want)}, got {list(np.shape(bias))}")
        bias = jax.device_put(np.asarray(bias, np.float32))
        return run(tokens, constraint=PrefixPrior(constraint, child, bias, w))

    return decode_with_prior


def recall_at_k(
    decode_fn: Callable[[PyTree, jax.Array], BeamResult],
    params: PyTree,
    tokens: np.ndarray,
    target_sids: np.ndarray,
    *,
    batch_size: int,
    mesh: Mesh,
) -> float:
    """Fraction of rows whose target SID is among the valid beams (last batch padded, trimmed)."""
    hits = []
    for batch, targets in padded_batches(tokens, target_sids, batch_size=batch_size):
        res = decode_fn(params, sharding.put_batch(batch, mesh))
        beams, valid = jax.device_get((res.tokens, res.valid))
        same = (beams == targets[:, None, :]).all(-1)
        hits.append((same & valid).any(-1))
    return float(np.concatenate(hits)[: len(tokens)].mean())


def read_description(
    path: Path, what: str, command: str
) -> tuple[dict, SeqModelConfig, TokenSpace]:
    """(info, config, token space) of a trained model's JSON description (retriever.json,
    draft.json); a missing or unreadable one is an ArtifactError naming the file."""
    if not path.exists():
        raise ArtifactError(f"{path}: no trained {what}; run `genret {command}` first")
    try:
        info = json.loads(path.read_text())
        if not isinstance(info, dict):
            raise ValueError(f"expected an object, got {type(info).__name__}")
        cfg = from_dict(SeqModelConfig, info["seqmodel"], "seqmodel.")
        for name in ("num_levels", "codebook_size"):
            value = info[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        space = TokenSpace(num_levels=info["num_levels"], codebook_size=info["codebook_size"])
    except (ValueError, KeyError, TypeError) as e:
        raise ArtifactError(
            f"{path}: not a {what} description ({type(e).__name__}: {e}); retrain it"
        ) from None
    return info, cfg, space


def load_retriever(
    retriever_dir: Path | str, *, read_only: bool = False, rebuild: str = "retrain it"
) -> Retriever:
    """The best checkpoint's model from a `train_and_evaluate` work directory; `read_only`: a
    damaged checkpoint is an ArtifactError ending with `rebuild`, not set aside."""
    return load_described_retriever(retriever_dir, read_only=read_only, rebuild=rebuild)[0]


def load_described_retriever(
    retriever_dir: Path | str, *, read_only: bool = False, rebuild: str = "retrain it"
) -> tuple[Retriever, dict]:
    """`load_retriever`'s model with its description (retriever.json), read once."""
    retriever_dir = Path(retriever_dir)
    info, cfg, space = read_description(retriever_dir / MODEL_FILE, "retriever", "train-retriever")
    graphdef, abstract = abstract_train_state(cfg, space)
    ckpts = Checkpoints(retriever_dir / CHECKPOINTS_DIR, read_only=read_only, rebuild=rebuild)
    try:
        state = ckpts.restore_best_params(abstract)
    finally:
        ckpts.close()
    return nnx.merge(graphdef, eval_params(state)), info
