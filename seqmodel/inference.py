"""A trained retriever at work: loading its best checkpoint, prefill + beam search decoding, and
validation recall; every jitted function takes the parameters as an argument."""

import json
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from jaxtyping import Array, Int, PyTree

from data.errors import ArtifactError
from data.pipeline import padded_batches
from decoding import BeamResult, Constraint, LevelScoring, PrefixPrior, PrefixTable, beam_search
from seqmodel import sharding
from seqmodel.checkpoint import Checkpoints
from seqmodel.config import ENSEMBLE_RULES, SeqModelConfig
from seqmodel.files import CHECKPOINTS_DIR, MODEL_FILE
from seqmodel.state import Retriever, abstract_train_state, eval_params
from seqmodel.tokens import TokenSpace


def decode(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    tokens: Int[Array, "B T"],
    constraint: Constraint,
    beam_size: int,
    scoring: LevelScoring | None = None,
) -> BeamResult:
    """Prefill + beam search over the model's step function (call inside jax.jit)."""
    model = nnx.merge(graphdef, params)
    log_probs, cache = model.prefill(tokens)
    return beam_search(
        model.step,
        log_probs,
        cache,
        constraint,
        beam_size=beam_size,
        num_levels=model.space.num_levels,
        scoring=scoring,
    )


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
    jitted `(tokens [B, T], bias [B, P]) -> BeamResult`, where bias holds each row's
    log p(node | parent) (`PrefixTable.conditional_log_prior`), added `weight` times. A list of
    several models decodes their ensemble (`ensemble_decoder`, by `rule`)."""
    table.check_vocab(constraint.vocab_size)
    models = model if isinstance(model, list) else [model]
    constraint, scoring = jax.device_put((constraint, scoring))
    child, w = jax.device_put((table.child, np.float32(weight)))
    if len(models) > 1:
        ensemble = ensemble_decoder(models, beam_size=beam_size, rule=rule)

        def fn(bias, tokens):
            return ensemble(
                tokens, PrefixPrior(constraint, child, jax.device_put(bias), w), scoring
            )

    else:
        graphdef, params = nnx.split(models[0])
        params = jax.device_put(params)

        def one(p, c, s, child, w, bias, t):
            return decode(graphdef, p, t, PrefixPrior(c, child, bias, w), beam_size, s)

        jitted = jax.jit(one)

        def fn(bias, tokens):
            return jitted(params, constraint, scoring, child, w, bias, tokens)

    def run(tokens: np.ndarray, bias: np.ndarray) -> BeamResult:
        if np.shape(bias) != (len(tokens), table.num_nodes):
            want = (len(tokens), table.num_nodes)
            raise ValueError(f"bias: expected {list(want)}, got {list(np.shape(bias))}")
        return fn(np.asarray(bias, np.float32), tokens)

    return run


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


def ensemble_decoder(
    models: list[Retriever], *, beam_size: int, rule: str = "product"
) -> Callable[[np.ndarray, Constraint, LevelScoring | None], BeamResult]:
    """A `(tokens, constraint, scoring) -> BeamResult` over the ensemble of `models`; `scoring`
    is a decoding.LevelScoring, or None for the ensemble's joint log-probability.

    rule "product": each level's log-probabilities averaged over the members and renormalised
    (a geometric mean per level). rule "mixture": a beam scores log mean_i P_i(prefix), the
    members' mean joint probability of its prefix, exactly: every beam carries each member's
    log P_i(prefix) and the level's increment is logsumexp_i(log P_i(prefix) + log p_i(code |
    prefix)) - logsumexp_i(log P_i(prefix)), which sums over the levels to the mixture's
    log-probability of the whole SID.

    The models' parameters are put on the device once, here; they and the constraint are
    arguments of the compiled function, not constants inside it, so one decoder serves every
    constraint (put the constraint on the device once too, with `jax.device_put`, when it is
    reused)."""
    if rule not in ENSEMBLE_RULES:
        raise ValueError(f"ensemble rule {rule!r}: one of {ENSEMBLE_RULES}")
    num_levels = models[0].space.num_levels
    graphdefs, params = zip(*(nnx.split(m) for m in models), strict=True)
    params = jax.device_put(params)

    def mean_log_probs(parts):
        return jax.nn.log_softmax(sum(parts) / len(parts), axis=-1)

    def mixture(parts, prefix_lp):
        """(the level's increment [..., V], each member's log-probs [..., M, V]) from the members'
        outputs and their log P_i(prefix) [..., M]."""
        lp = jax.nn.log_softmax(jnp.stack(parts, axis=-2), axis=-1)
        joint = jax.nn.logsumexp(prefix_lp[..., None] + lp, axis=-2)
        return joint - jax.nn.logsumexp(prefix_lp, axis=-1)[..., None], lp

    @jax.jit
    def run(params, constraint, tokens, scoring) -> BeamResult:
        ms = [nnx.merge(g, p) for g, p in zip(graphdefs, params, strict=True)]
        prefilled = [m.prefill(tokens) for m in ms]
        caches = tuple(c for _, c in prefilled)
        parts = [lp for lp, _ in prefilled]
        if rule == "product":
            first = mean_log_probs(parts)

            def step(codes, level, caches):
                outs = [m.step(codes, level, c) for m, c in zip(ms, caches, strict=True)]
                return mean_log_probs([o[0] for o in outs]), tuple(o[1] for o in outs)

        else:
            # The cache also carries, per beam, each member's log P_i(prefix) [M] and its last
            # level's log-probs [M, V], so the code chosen there can be added at the next step.
            prefix_lp = jnp.zeros((tokens.shape[0], len(ms)), jnp.float32)
            first, lp = mixture(parts, prefix_lp)
            caches = (caches, prefix_lp, lp)

            def step(codes, level, carried):
                caches, prefix_lp, lp = carried
                idx = jnp.broadcast_to(codes[..., None, None], (*lp.shape[:-1], 1))
                prefix_lp = prefix_lp + jnp.take_along_axis(lp, idx, axis=-1)[..., 0]
                outs = [m.step(codes, level, c) for m, c in zip(ms, caches, strict=True)]
                inc, lp = mixture([o[0] for o in outs], prefix_lp)
                return inc, (tuple(o[1] for o in outs), prefix_lp, lp)

        return beam_search(
            step,
            first,
            caches,
            constraint,
            beam_size=beam_size,
            num_levels=num_levels,
            scoring=scoring,
        )

    return lambda tokens, constraint, scoring: run(
        params, constraint, jax.device_put(tokens), scoring
    )


def read_description(
    path: Path, what: str, command: str
) -> tuple[dict, SeqModelConfig, TokenSpace]:
    """(info, config, token space) of a trained model's JSON description (retriever.json,
    draft.json); a missing or unreadable one is an ArtifactError naming the file."""
    if not path.exists():
        raise ArtifactError(f"{path}: no trained {what}; run `genret {command}` first")
    try:
        info = json.loads(path.read_text())
        cfg = SeqModelConfig(**info["seqmodel"])
        space = TokenSpace(num_levels=info["num_levels"], codebook_size=info["codebook_size"])
    except (ValueError, KeyError, TypeError) as e:
        raise ArtifactError(
            f"{path}: not a {what} description ({type(e).__name__}: {e}); retrain it"
        ) from None
    return info, cfg, space


def load_retriever(retriever_dir: Path | str) -> Retriever:
    """The best checkpoint's model from a `train_and_evaluate` work directory."""
    retriever_dir = Path(retriever_dir)
    _, cfg, space = read_description(retriever_dir / MODEL_FILE, "retriever", "train-retriever")
    graphdef, abstract = abstract_train_state(cfg, space)
    ckpts = Checkpoints(retriever_dir / CHECKPOINTS_DIR)
    try:
        state = ckpts.restore_best_params(abstract)
    finally:
        ckpts.close()
    return nnx.merge(graphdef, eval_params(state))


def retrieval_fn(
    model: Retriever, constraint: Constraint, *, beam_size: int, scoring: LevelScoring | None = None
) -> Callable[[np.ndarray], BeamResult]:
    """A jitted `tokens [B, T] -> BeamResult`; beams are ranked by `scoring` when given
    (decoding.scoring), else by their joint log-probability.

    The model's parameters, the constraint and the scoring are arguments of the compiled
    function (moved to the device once, here), never constants baked into it.
    """
    graphdef, params = nnx.split(model)
    params, constraint, scoring = jax.device_put((params, constraint, scoring))
    fn = jax.jit(lambda p, c, s, t: decode(graphdef, p, t, c, beam_size, s))

    def run(tokens: np.ndarray) -> BeamResult:
        return fn(params, constraint, scoring, jax.device_put(np.asarray(tokens)))

    return run
