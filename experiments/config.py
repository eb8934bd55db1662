"""The root config tree, preset loading, typed `--set key=value` overrides and JSON round trips."""

import dataclasses
import difflib
import importlib
import json
import math
import pkgutil
import types
import typing
from pathlib import Path

from data.config import AMAZON_SHORTCUTS, DataConfig, amazon_category
from data.errors import ArgumentError
from data.splits import check_fraction
from data.typed_json import from_dict
from decoding.config import DecodeConfig
from experiments.evaluation.profile import ContentProfile
from rqvae.config import RQVAEConfig
from seqmodel.config import ENSEMBLE_RULES, HARNESS_LAYOUTS, ParallelCodesConfig, SeqModelConfig

CONTENT_VECTORS = ("embeddings", "tfidf")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """What the evaluations run: cold-start fractions, beam width, test-user cap."""

    cold_start_fractions: tuple[float, ...] = (0.02, 0.05)
    beam_size: int = 20
    max_test_users: int = 0  # 0: all
    # Cold-start beam scores (decoding.scoring.prior_correction), unconstrained and STATIC alike:
    # subtract this multiple of the training log prior of the first two codes, and weight each
    # level's log-prob (empty: 1 at every level). Plain STATIC is also reported when either is set.
    cold_prior_weight: float = 0.0
    cold_level_weights: tuple[float, ...] = ()
    # The content prior in STATIC's cold-start beams (decoding.prefix_prior; method
    # `static_content`): each user's softmax over the cold items of the content neighbour's
    # cosines / cold_content_temperature, entering the beam scores level by level, this many times.
    # 0: off (the method is not run).
    cold_content_weight: float = 0.0
    cold_content_temperature: float = 0.05
    # static_content searches with one beam per cold item, so its top eval.beam_size are those of
    # the summed scores over the whole cold set (no item pruned at a shallow level), at the cost
    # of a beam as wide as the cold set; False: a beam of eval.beam_size.
    cold_content_exact: bool = False
    # The item vectors of the content neighbour and of its prior: "embeddings", the tokenizer's
    # item-text embeddings (rqvae.embedder; TF-IDF + SVD by default), or "tfidf", the same
    # TF-IDF rows never projected (rqvae.embed.tfidf_matrix, sparse; rqvae.tfidf_* settings).
    cold_content_vectors: str = "embeddings"
    # The user's text profile, the query of the content neighbour and of its prior: the weighted
    # mean of the unit vectors of the last cold_content_recent history items, the item j places
    # from the end weighted cold_content_decay**j (1: the plain mean).
    cold_content_recent: int = 3
    cold_content_decay: float = 1.0
    # A LIGER-style hybrid (method `hybrid`): the content neighbour's ranking and STATIC's beams
    # (method `static`) fused by weighted reciprocal rank, weight 1 / (cold_hybrid_offset + rank)
    # for STATIC and cold_hybrid_weight times that for the content neighbour. 0: off.
    cold_hybrid_weight: float = 0.0
    cold_hybrid_offset: float = 60.0
    # The parallel-codes retriever over the cold set (method `parallel`): for each fraction, RPG's
    # model (the `parallel` section) trained on the split's training histories
    # (WORKDIR/parallel_cold_<p>) scores every cold item by its text's codes, exactly over the
    # cold set; with cold_hybrid_weight, also `parallel_content`, its ranking fused with the
    # content neighbour's as `hybrid` fuses STATIC's. Needs eval.cold.
    cold_parallel: bool = False
    # Leave-one-out beam scores (eval-warm): the joint log-probability minus this multiple of the
    # training log prior of the first `warm_prior_levels` codes, a popularity correction for a
    # retriever that under-ranks rarely bought items. Plain STATIC is also reported when set.
    warm_prior_weight: float = 0.0
    warm_prior_levels: int = 2
    # The co-occurrence prior in the leave-one-out beams (method `static_cooccurrence`, beside the
    # retriever's own `static_all_items`): each user's p(item | last item) from the pairs adjacent
    # in the training histories, smoothed toward popularity with warm_cooc_smoothing
    # pseudo-counts, entering the beam scores level by level this many times. 0: off.
    warm_cooc_weight: float = 0.0
    warm_cooc_smoothing: float = 10.0
    warm: bool = True  # the pipeline also trains a leave-one-out retriever and runs eval-warm
    # The pipeline also trains a leave-one-out retriever with each of these `seqmodel.seed`s
    # (WORKDIR/retriever_loo_seedN), and eval-warm ranks them with the main retriever as one
    # ensemble (of seeds; `--ensemble` by hand), by `warm_ensemble_rule`.
    warm_ensemble_seeds: tuple[int, ...] = ()
    # How an ensemble ranks a beam: product (each level's log-probabilities averaged over the
    # members and renormalised) or mixture (log of the members' mean joint probability of the
    # prefix, exact level by level; seqmodel.inference.ensemble_decoder).
    warm_ensemble_rule: str = "product"
    cold: bool = True  # the pipeline trains the cold-start retrievers and runs eval-cold-start
    # A preset name: the pipeline's leave-one-out part runs as that preset in WORKDIR/loo (its own
    # tokenizer and retrievers; one work directory holds one tokenizer), and its results/warm.json
    # is copied to WORKDIR/results/warm.json. Empty: leave-one-out runs on this run's tokenizer.
    warm_preset: str = ""
    sasrec: bool = False  # the pipeline also trains and ranks the SASRec baseline (leave-one-out)
    # The pipeline also trains and ranks the parallel-codes retriever (leave-one-out; `parallel`).
    parallel: bool = False
    seed: int = 0


# SASRec (causal self-attention over item ids, full-softmax cross-entropy), chosen on Beauty's
# validation split (docs/RESULTS.md, "The SASRec baseline"): 2 blocks of width 256, dropout 0.5, a
# 50-item window, Adam 1e-3, up to 100 epochs, early-stopped on 10,000 validation users' Recall@10
# once per Beauty epoch with patience 20; each batch holds users of similar history lengths.
SASREC = SeqModelConfig(
    num_layers=2,
    d_model=256,
    num_heads=2,
    mlp_dim=1024,
    dropout=0.5,
    max_history=50,
    batch_size=128,
    learning_rate=1e-3,
    warmup_steps=100,
    weight_decay=0.0,
    num_epochs=100,
    eval_every=175,
    eval_users=10_000,
    patience=20,
    layout="bucketed",
)

# The parallel-codes retriever (RPG: long PQ codes, parallel cosine heads), untuned: RPG's Beauty
# codes (32 x 256 on a 128-wide whitened PCA, temperature 0.03) and 50-item window, a smaller
# transformer than its 448-wide one for a 2-core CPU, SASRec's early stopping and row layout
# (bucketed: 2.4x less time per epoch than padded rows, docs/BENCHMARKS.md).
PARALLEL = ParallelCodesConfig(
    num_layers=2,
    d_model=128,
    num_heads=4,
    mlp_dim=256,
    dropout=0.3,
    max_history=50,
    batch_size=256,
    learning_rate=2e-3,
    warmup_steps=100,
    weight_decay=0.0,
    num_epochs=50,
    eval_every=87,
    eval_users=10_000,
    patience=10,
    layout="bucketed",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Everything one run needs; saved as config.json in the work directory."""

    name: str = "synthetic"
    seed: int = 0
    data: DataConfig = DataConfig()
    rqvae: RQVAEConfig = RQVAEConfig()
    seqmodel: SeqModelConfig = SeqModelConfig()
    decode: DecodeConfig = DecodeConfig()
    eval: EvalConfig = EvalConfig()
    # The SASRec baseline (genret sasrec): the retriever's transformer config over item ids.
    sasrec: SeqModelConfig = SASREC
    # The parallel-codes retriever (genret parallel): item codes by product quantization of the
    # tokenizer's text embeddings (rqvae.embedder), a transformer over item positions.
    parallel: ParallelCodesConfig = PARALLEL
    # How many stages `genret pipeline` runs at once, each in a process of its own, where they do
    # not wait on each other (the retrievers of the cold-start fractions and leave-one-out), on
    # a CPU and in one process only; 1: one after another in one process. It enters no stage
    # key: a stage's numbers are the same either way (docs/BENCHMARKS.md, "Stages side by side").
    jobs: int = 1


def paper_dataset(data: DataConfig) -> str | None:
    """beauty / sports / toys when the run is on one of the papers' datasets (the only ones beside
    which their numbers are printed), else None."""
    if data.dataset in AMAZON_SHORTCUTS:
        return data.dataset
    if data.dataset == "amazon2014":
        by_category = {c: name for name, c in AMAZON_SHORTCUTS.items()}
        return by_category.get(data.category)
    return None


def _at_least(cfg, section: str, names: tuple[str, ...], low) -> None:
    for name in names:
        value = getattr(getattr(cfg, section), name)
        if value < low:
            raise ArgumentError(f"{section}.{name}={value}: must be >= {low}")


def _leaves(cfg, prefix: str = ""):
    """(key, value) of every scalar in the config tree, tuples' elements included."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, f"{prefix}{f.name}.")
        else:
            yield from (
                (prefix + f.name, v) for v in (value if isinstance(value, tuple) else (value,))
            )


# Ints become array sizes, step counts and seeds on the device, where JAX's default is int32.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def validate(cfg: Config) -> Config:
    """Checks every field a stage would reject later, so a command fails before any work starts
    and a rejected value never reaches config.json; raises ArgumentError naming the key."""
    for key, value in _leaves(cfg):
        if isinstance(value, float) and not math.isfinite(value):
            raise ArgumentError(f"{key}={value}: must be a finite number")
        if type(value) is int and not INT_MIN <= value <= INT_MAX:
            raise ArgumentError(f"{key}={value}: must be in [{INT_MIN}, {INT_MAX}] (int32)")
    if cfg.data.dataset == "amazon2014" and not cfg.data.category:
        raise ArgumentError("--category: required with --dataset amazon2014, e.g. Beauty")
    amazon_category(cfg.data)  # a category that contradicts the dataset
    if cfg.jobs < 1:
        raise ArgumentError(f"jobs={cfg.jobs}: must be >= 1")
    _at_least(cfg, "rqvae", ("embed_dim", "num_levels", "codebook_size", "latent_dim"), 1)
    _at_least(cfg, "rqvae", ("batch_size", "num_steps", "checkpoint_every", "tfidf_min_df"), 1)
    _at_least(cfg, "rqvae", ("warmup_steps", "restart_every"), 0)
    if any(h < 1 for h in cfg.rqvae.hidden_dims):
        raise ArgumentError(f"rqvae.hidden_dims={cfg.rqvae.hidden_dims}: every width must be >= 1")
    if cfg.rqvae.embedder not in ("tfidf", "minilm"):
        raise ArgumentError(f"rqvae.embedder={cfg.rqvae.embedder!r}: expected tfidf or minilm")
    if cfg.rqvae.fit_on not in ("all", "warm"):
        raise ArgumentError(f"rqvae.fit_on={cfg.rqvae.fit_on!r}: expected all or warm")
    if not 0.0 <= cfg.rqvae.restart_until <= 1.0:
        raise ArgumentError(f"rqvae.restart_until={cfg.rqvae.restart_until}: must be in [0, 1]")
    for name in ("learning_rate",):
        if not getattr(cfg.rqvae, name) > 0:
            raise ArgumentError(f"rqvae.{name}={getattr(cfg.rqvae, name)}: must be > 0")
    _at_least(cfg, "seqmodel", ("num_epochs", "patience", "eval_users"), 1)
    _at_least(cfg, "seqmodel", ("warmup_steps", "max_steps"), 0)
    if not cfg.seqmodel.learning_rate > 0:
        raise ArgumentError(f"seqmodel.learning_rate={cfg.seqmodel.learning_rate}: must be > 0")
    _at_least(cfg, "decode", ("beam_size",), 1)
    _at_least(cfg, "decode", ("dense_levels",), 0)
    levels = cfg.rqvae.num_levels + 1  # SID levels: the RQ-VAE's codes and the collision level
    if cfg.decode.dense_levels > levels:
        raise ArgumentError(
            f"decode.dense_levels={cfg.decode.dense_levels}: must be <= the {levels} SID levels"
        )
    _at_least(cfg, "eval", ("beam_size",), 1)
    _at_least(cfg, "eval", ("max_test_users",), 0)
    if not cfg.eval.cold_start_fractions:
        raise ArgumentError("eval.cold_start_fractions: give at least one fraction")
    for p in cfg.eval.cold_start_fractions:
        check_fraction(p, "eval.cold_start_fractions")
    weights = cfg.eval.cold_level_weights
    if weights and len(weights) != levels:
        raise ArgumentError(
            f"eval.cold_level_weights: {len(weights)} weights for {levels} SID levels"
        )
    w, t = cfg.eval.cold_content_weight, cfg.eval.cold_content_temperature
    if not (math.isfinite(w) and w >= 0):
        raise ArgumentError(f"eval.cold_content_weight={w}: must be finite and >= 0 (0: off)")
    if not (math.isfinite(t) and t > 0):
        raise ArgumentError(f"eval.cold_content_temperature={t}: must be finite and > 0")
    w, k0 = cfg.eval.cold_hybrid_weight, cfg.eval.cold_hybrid_offset
    if not (math.isfinite(w) and w >= 0):
        raise ArgumentError(f"eval.cold_hybrid_weight={w}: must be finite and >= 0 (0: off)")
    if not (math.isfinite(k0) and k0 > 0):
        raise ArgumentError(f"eval.cold_hybrid_offset={k0}: must be finite and > 0")
    ContentProfile.of(cfg.eval)  # checks its bounds, naming both keys
    if cfg.eval.cold_content_vectors not in CONTENT_VECTORS:
        raise ArgumentError(
            f"eval.cold_content_vectors={cfg.eval.cold_content_vectors!r}: must be one of "
            f"{', '.join(CONTENT_VECTORS)}"
        )
    if not 1 <= cfg.eval.warm_prior_levels <= levels:
        raise ArgumentError(
            f"eval.warm_prior_levels={cfg.eval.warm_prior_levels}: must be in [1, {levels}] "
            "(the SID levels)"
        )
    if not math.isfinite(cfg.eval.warm_prior_weight):
        raise ArgumentError(f"eval.warm_prior_weight={cfg.eval.warm_prior_weight}: must be finite")
    w, s = cfg.eval.warm_cooc_weight, cfg.eval.warm_cooc_smoothing
    if not (math.isfinite(w) and w >= 0):
        raise ArgumentError(f"eval.warm_cooc_weight={w}: must be finite and >= 0 (0: off)")
    if not (math.isfinite(s) and s > 0):
        raise ArgumentError(f"eval.warm_cooc_smoothing={s}: must be finite and > 0")
    if cfg.eval.warm_ensemble_rule not in ENSEMBLE_RULES:
        raise ArgumentError(
            f"eval.warm_ensemble_rule={cfg.eval.warm_ensemble_rule!r}: one of {ENSEMBLE_RULES}"
        )
    seeds = cfg.eval.warm_ensemble_seeds
    if seeds and not cfg.eval.warm:
        raise ArgumentError("eval.warm_ensemble_seeds: needs eval.warm=true")
    if len(set(seeds)) != len(seeds) or cfg.seqmodel.seed in seeds or min(seeds, default=0) < 0:
        raise ArgumentError(
            f"eval.warm_ensemble_seeds={seeds}: give distinct seeds >= 0, other than "
            f"seqmodel.seed={cfg.seqmodel.seed} (the main retriever's)"
        )
    if cfg.eval.cold_parallel and not cfg.eval.cold:
        raise ArgumentError("eval.cold_parallel: needs eval.cold=true (it joins eval-cold-start)")
    for section in ("seqmodel", "parallel"):
        if getattr(cfg, section).sampled_negatives:
            raise ArgumentError(
                f"{section}.sampled_negatives: only the sasrec section trains with a sampled "
                "softmax"
            )
    for section in ("sasrec", "parallel"):
        layout = getattr(cfg, section).layout
        if layout not in HARNESS_LAYOUTS:
            raise ArgumentError(f"{section}.layout={layout!r}: one of {', '.join(HARNESS_LAYOUTS)}")
    _at_least(cfg, "parallel", ("num_epochs", "patience", "eval_users"), 1)
    _at_least(cfg, "parallel", ("warmup_steps", "max_steps"), 0)
    if not cfg.parallel.learning_rate > 0:
        raise ArgumentError(f"parallel.learning_rate={cfg.parallel.learning_rate}: must be > 0")
    if not (cfg.eval.cold or cfg.eval.warm or cfg.eval.sasrec or cfg.eval.parallel):
        raise ArgumentError(
            "eval.cold, eval.warm, eval.sasrec and eval.parallel: all false leaves the pipeline "
            "nothing to do"
        )
    if cfg.eval.warm_preset:
        warm_run_config(cfg)  # names a preset that can run the leave-one-out part
        if not cfg.eval.warm or seeds:
            raise ArgumentError(
                f"eval.warm_preset={cfg.eval.warm_preset}: needs eval.warm=true, and the ensemble "
                "seeds belong to that preset (eval.warm_ensemble_seeds must be empty here)"
            )
    synth = cfg.data.synthetic
    for name in ("num_items", "num_users", "num_categories"):
        if getattr(synth, name) < 1:
            raise ArgumentError(f"data.synthetic.{name}={getattr(synth, name)}: must be >= 1")
    return cfg


def warm_run_config(cfg: Config) -> Config:
    """The config of the run's leave-one-out part (`eval.warm_preset`): that preset on this run's
    data, with leave-one-out only. An ArgumentError if the name is no preset or names another."""
    name = cfg.eval.warm_preset
    try:
        warm = load_preset(name)
    except ArgumentError:
        raise ArgumentError(
            f"eval.warm_preset={name!r}: no such preset; choose from {', '.join(preset_names())}"
        ) from None
    if warm.eval.warm_preset:
        raise ArgumentError(
            f"eval.warm_preset={name}: that preset sets eval.warm_preset={warm.eval.warm_preset} "
            "itself; name the preset that runs leave-one-out on its own tokenizer"
        )
    ev = dataclasses.replace(
        warm.eval, warm=True, cold=False, cold_parallel=False, sasrec=False, parallel=False
    )
    return validate(dataclasses.replace(warm, data=cfg.data, eval=ev))


def preset_names() -> list[str]:
    import experiments.configs as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def load_preset(name: str) -> Config:
    """Returns `experiments/configs/<name>.py`'s get_config()."""
    names = preset_names()
    if name not in names:
        raise ArgumentError(f"--config: unknown preset {name!r}; choose from {', '.join(names)}")
    return importlib.import_module(f"experiments.configs.{name}").get_config()


def _parse_value(text: str, tp, key: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if text.lower() in ("none", "null") and len(args) < len(typing.get_args(tp)):
            return None
        return _parse_value(text, args[0], key)
    if origin is tuple:
        (elem, *rest) = typing.get_args(tp)
        inner = text.strip("()[] ")
        if not inner:
            return ()
        parts = inner.split(",")
        for i, p in enumerate(parts, 1):
            if not p.strip():
                raise ArgumentError(
                    f"--set {key}={text}: empty item {i}; separate the values by single commas"
                )
        return tuple(_parse_value(p.strip(), elem, key) for p in parts)
    if tp is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ArgumentError(f"--set {key}: expected true/false, got {text!r}")
    if tp in (int, float):
        try:
            return tp(text)
        except ValueError:
            raise ArgumentError(f"--set {key}: expected {tp.__name__}, got {text!r}") from None
    if tp is str:
        return text
    raise ArgumentError(f"--set {key}: fields of type {tp} cannot be set from the command line")


def _field_paths(cfg, prefix="") -> list[str]:
    out = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += _field_paths(value, f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def _replace_path(cfg, parts: list[str], text: str, key: str):
    hints = typing.get_type_hints(type(cfg))
    name = parts[0]
    if name not in hints or name not in {f.name for f in dataclasses.fields(cfg)}:
        raise KeyError(name)
    current = getattr(cfg, name)
    if len(parts) == 1:
        if dataclasses.is_dataclass(current):
            raise ArgumentError(f"--set {key}: is a group; set one of its fields")
        return dataclasses.replace(cfg, **{name: _parse_value(text, hints[name], key)})
    if not dataclasses.is_dataclass(current):
        raise KeyError(name)
    return dataclasses.replace(cfg, **{name: _replace_path(current, parts[1:], text, key)})


def _key_hint(cfg: Config, key: str) -> str:
    """What an unknown `--set` key may have meant: the nearest known keys, else the keys of its
    group, else the groups."""
    paths = _field_paths(cfg)
    if near := difflib.get_close_matches(key, paths, n=3, cutoff=0.8):
        return f"did you mean {' or '.join(near)}?"
    group = key.split(".")[0] + "."
    if inside := [p for p in paths if p.startswith(group)]:
        return f"the keys of {group[:-1]}: {', '.join(p[len(group) :] for p in inside)}"
    groups = sorted({p.split(".")[0] for p in paths})
    return f"keys start with one of: {', '.join(groups)}"


def apply_overrides(cfg: Config, overrides: list[str]) -> Config:
    """Applies `a.b=value` strings; unknown keys and badly typed values raise ValueError."""
    for item in overrides:
        if "=" not in item:
            raise ArgumentError(f"--set {item!r}: expected key=value, e.g. seqmodel.num_layers=4")
        key, text = item.split("=", 1)
        key = key.strip()
        try:
            cfg = _replace_path(cfg, key.split("."), text.strip(), key)
        except KeyError:
            raise ArgumentError(f"--set {key}: unknown config key; {_key_hint(cfg, key)}") from None
        except ArgumentError:
            raise
        except (ValueError, TypeError) as e:  # a sub-config's own check (__post_init__)
            raise ArgumentError(f"--set {item}: {e}") from None
    return cfg


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


# Groups a saved config.json may lack: each belongs to a stage that its eval.* flag switches on.
_OPTIONAL_GROUPS = ("parallel",)


def load_json(path: str | Path) -> Config:
    """A saved config.json; a malformed one is an ArgumentError naming the file."""
    if not Path(path).is_file():
        raise ArgumentError(f"{path}: not a file; remove it, or pass --config NAME")
    try:
        saved = json.loads(Path(path).read_text())
        if isinstance(saved, dict):
            # A config.json without these groups never ran their stages (eval.* off): defaults.
            for name in _OPTIONAL_GROUPS:
                saved.setdefault(name, dataclasses.asdict(getattr(Config(), name)))
        return from_dict(Config, saved, groups_required=True)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ArgumentError(
            f"{path}: not a valid genret config ({e}); fix it, or pass --config NAME to start "
            "from a preset"
        ) from None
