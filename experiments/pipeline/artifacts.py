"""Reading a work directory's artifacts, each checked: a missing or damaged one is an
ArtifactError that names it and the command that makes it again."""

import json
from pathlib import Path

import numpy as np

import rqvae
from data import prepared
from data.errors import ArgumentError, ArtifactError
from data.examples import (
    ColdStartHistories,
    RetrieverData,
    cold_start_examples,
    cold_start_histories,
    loo_examples,
)
from data.types import InteractionData
from experiments.config import Config
from experiments.pipeline.layout import RunLayout, Split
from rqvae.sids import check_sids_match
from seqmodel.files import CHECKPOINTS_DIR, MODEL_FILE, SUMMARY_FILE
from seqmodel.state import Retriever

_loaded: dict[str, tuple[str, InteractionData]] = {}


def load_dataset(layout: RunLayout) -> InteractionData:
    """The prepared dataset, read once per process while its content key is unchanged."""
    key_file = layout.require(
        layout.prepared / prepared.KEY_FILE, f"genret prepare --workdir {layout.root}"
    )
    path, key = str(layout.prepared.resolve()), key_file.read_text()
    if path not in _loaded or _loaded[path][0] != key:
        _loaded.clear()
        try:
            _loaded[path] = (key, prepared.load_prepared(layout.prepared))
        except Exception as e:  # tfds, array_record and json raise many types for one damaged file
            raise ArtifactError(
                f"{layout.prepared}: the prepared dataset does not load ({type(e).__name__}: "
                f"{e}); delete it and run `genret prepare --workdir {layout.root}`"
            ) from None
    return _loaded[path][1]


def load_sids(cfg: Config | None, layout: RunLayout, ds: InteractionData) -> np.ndarray:
    """The tokenizer's SIDs, checked against the prepared catalog and the config's codebook
    (cfg None: the catalog alone)."""
    layout.require(layout.sids, f"genret train-tokenizer --workdir {layout.root}")
    sids, asins = rqvae.load_sids(layout.tokenizer)
    codebook_size = None if cfg is None else cfg.rqvae.codebook_size
    check_sids_match(
        asins, ds.catalog.asins, layout.tokenizer, sids=sids, codebook_size=codebook_size
    )
    return np.asarray(sids, np.int32)


def _leave_one_out_elsewhere(layout: RunLayout, preset: str) -> str:
    """The one line for a leave-one-out request at a work directory whose leave-one-out part is
    the `eval.warm_preset` run in WORKDIR/loo."""
    warm = layout.warm_run.root
    return (
        f"--workdir {layout.root}: its leave-one-out part runs as preset {preset} in {warm} "
        f"(eval.warm_preset); pass --workdir {warm}"
    )


def own_leave_one_out(cfg: Config, layout: RunLayout) -> None:
    """An ArgumentError when this run's leave-one-out part lives in another work directory
    (`eval.warm_preset`), naming that directory."""
    if cfg.eval.warm_preset:
        raise ArgumentError(_leave_one_out_elsewhere(layout, cfg.eval.warm_preset))


def require_retriever(layout: RunLayout, split: Split, retriever_dir: Path | None = None) -> Path:
    """The directory of `split`'s trained retriever (or `retriever_dir`), without loading it; a
    missing one is an ArtifactError naming it and the command that trains it, or, where the
    pipeline ran the leave-one-out part in WORKDIR/loo, that directory (the callers that hold
    no config: serve, train-draft, bench-decode)."""
    rdir = layout.retriever(split) if retriever_dir is None else Path(retriever_dir)
    warm = layout.warm_run
    if retriever_dir is None and split.kind == "loo" and not rdir.exists() and warm.config.exists():
        try:
            preset = json.loads(warm.config.read_text())["name"]
        except (OSError, ValueError, KeyError, TypeError):
            preset = "?"
        raise ArtifactError(_leave_one_out_elsewhere(layout, preset))
    command = split.train_command(layout.root)
    layout.require(rdir / MODEL_FILE, command)
    layout.require(rdir / CHECKPOINTS_DIR, command)
    return rdir


def load_retriever(
    layout: RunLayout,
    split: Split,
    retriever_dir: Path | None = None,
    *,
    read_only: bool = True,
) -> Retriever:
    """The best checkpoint's retriever of `split` (or of `retriever_dir`), checked to have been
    trained on this work directory's SIDs and split: its recorded inputs fingerprint. Readers
    (evaluation, serving) change nothing: a damaged checkpoint is an ArtifactError naming it and
    the command that retrains; the pipeline's own check (`read_only=False`) sets it aside."""
    from seqmodel.inference import load_retriever as load

    rdir = require_retriever(layout, split, retriever_dir)
    check_retriever_inputs(layout, split, rdir)
    command = split.train_command(layout.root)
    rebuild = f"delete {rdir} and run `{command}` to retrain it"
    return load(rdir, read_only=read_only, rebuild=rebuild)


def check_retriever_inputs(layout: RunLayout, split: Split, rdir: Path) -> None:
    """An ArtifactError naming `rdir` and the command that retrains it when the retriever there
    was trained on other SIDs or another split than this work directory's (a tokenizer trained
    again since, say): its numbers would mean other items."""
    command = split.train_command(layout.root)
    ds = load_dataset(layout)
    if not trained_on(rdir, ds, load_sids(None, layout, ds), split, command):
        raise ArtifactError(
            f"{rdir}: trained on other SIDs or another split than {layout.root} holds now (its "
            f"inputs fingerprint differs); retrain it: `{command}`"
        )


def trained_on(
    rdir: Path, ds: InteractionData, sids: np.ndarray, split: Split, command: str
) -> bool:
    """Whether the retriever in `rdir` was trained on these SIDs and this split: its recorded
    inputs fingerprint against theirs (`command` trains it, for a missing description). A
    distilled retriever's holds its teacher's, which its description records beside it."""
    from seqmodel.inference import read_description
    from seqmodel.train import inputs_fingerprint

    info, seq, space = read_description(
        Path(rdir) / MODEL_FILE, "retriever", command.removeprefix("genret ")
    )
    data = split_examples(ds, sids, split, space.codebook_size, seq)
    return info.get("inputs") == inputs_fingerprint(seq, data, info.get("teacher", ""))


def evaluated_checkpoint(rdir: Path, root: Path | None = None) -> dict:
    """The fields a results file records of the retriever checkpoint it evaluated: the step that
    `load_retriever` restores from `rdir` (its best; where that one does not restore, the newest
    that does, the others having been set aside), the run's best step (train_summary.json's; None
    before training ends), whether the two differ (`fallback`), the retriever's directory
    (relative to the work directory `root` where it lies inside, so that a copied work directory
    still points at its own) and the inputs fingerprint it was trained under
    (`retriever_inputs`)."""
    from seqmodel.checkpoint import Checkpoints

    ckpts = Checkpoints(Path(rdir) / CHECKPOINTS_DIR, read_only=True)
    try:
        step = ckpts.best_params_step()
    finally:
        ckpts.close()
    try:
        best = json.loads((Path(rdir) / SUMMARY_FILE).read_text()).get("best_step")
    except (OSError, ValueError, AttributeError):
        best = None
    where = Path(rdir).resolve()
    if root is not None and where.is_relative_to(Path(root).resolve()):
        where = where.relative_to(Path(root).resolve())
    return {
        "retriever": str(where),
        "retriever_inputs": trained_inputs(Path(rdir)),
        "evaluated_step": step,
        "best_step": best,
        "fallback": best is not None and step != best,
    }


def trained_inputs(rdir: Path) -> str | None:
    """The inputs fingerprint in a retriever's description (None where it cannot be read)."""
    try:
        return json.loads((rdir / MODEL_FILE).read_text()).get("inputs")
    except (OSError, ValueError, AttributeError):
        return None


def _recorded_retriever(result: dict, root: Path) -> Path | None:
    """The retriever directory a results file records (relative ones under `root`), or None."""
    rdir = result.get("retriever")
    return None if not isinstance(rdir, str) else Path(root) / rdir


def _check_same_weights(path: Path, rdir: Path, result: dict) -> None:
    """An ArtifactError naming the results file when the retriever it evaluated, still in `rdir`,
    was trained again since (its inputs fingerprint is not the one the results record)."""
    inputs = result.get("retriever_inputs")
    if inputs is not None and (rdir / MODEL_FILE).is_file() and trained_inputs(rdir) != inputs:
        raise ArtifactError(
            f"{path}: {rdir} was trained again after this evaluation; rerun the evaluation that "
            f"writes {Path(path).name}"
        )


def check_result_current(layout: RunLayout, path: Path, result: dict) -> None:
    """An ArtifactError naming a results file whose numbers no longer describe the work
    directory: the retriever it evaluated was trained again since, or was trained on other SIDs
    than the tokenizer holds now. Results that record no retriever (model-free methods, files of
    earlier versions) pass."""
    rdir = _recorded_retriever(result, layout.root)
    if rdir is None or result.get("retriever_inputs") is None:
        return
    _check_same_weights(path, rdir, result)
    if (rdir / MODEL_FILE).is_file() and result.get("split") == "test":
        fraction = result.get("cold_start_fraction")
        split = Split("loo") if fraction is None else Split("cold", fraction)
        if rdir.resolve() == layout.retriever(split).resolve():
            check_retriever_inputs(layout, split, rdir)


def load_json_result(path: Path) -> dict:
    """A results file, or an ArtifactError naming it (the ledger's check of an evaluation).

    Also an ArtifactError when the retriever it evaluated (`evaluated_checkpoint`) now restores
    another step, as when its best checkpoint no longer restores and loading it falls back to
    another: the evaluation's output would change, so the pipeline runs it again.
    """
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(
            f"{path}: cannot be read ({type(e).__name__}); rerun the stage that writes it"
        ) from None
    # WORKDIR/results/NAME.json: relative retriever paths are under WORKDIR.
    rdir = _recorded_retriever(result, Path(path).resolve().parent.parent)
    step = result.get("evaluated_step")
    if rdir is not None:
        _check_same_weights(path, rdir, result)
    # Results from before steps were recorded, or whose retriever has moved: nothing to compare.
    if rdir is not None and step is not None and (rdir / CHECKPOINTS_DIR).is_dir():
        now = evaluated_checkpoint(rdir)["evaluated_step"]
        if now != step:
            raise ArtifactError(
                f"{path}: evaluated step {step} of {rdir}, which now restores step {now} (its "
                "best checkpoint no longer restores, or it trained on); rerun the evaluation"
            )
    return result


def split_examples(
    ds: InteractionData, sids: np.ndarray, split: Split, codebook_size: int, seq
) -> RetrieverData:
    """The training and validation examples of `split` (seq: the retriever's SeqModelConfig,
    for its holdout size and seed)."""
    if split.kind == "loo":
        return loo_examples(
            ds, sids, codebook_size=codebook_size, eval_users=seq.eval_users, seed=seq.seed
        )
    return cold_start_examples(
        ds,
        sids,
        codebook_size=codebook_size,
        fraction=split.fraction,
        eval_users=seq.eval_users,
        seed=seq.seed,
        validation=split.validation,
    )


def parallel_cold_histories(ds: InteractionData, split: Split, seq) -> ColdStartHistories:
    """What the parallel-codes retriever of a cold-start split trains and early-stops on (seq:
    the `parallel` section, for its holdout size and seed): the split's decoder retriever's."""
    return cold_start_histories(
        ds,
        fraction=split.fraction,
        eval_users=seq.eval_users,
        seed=seq.seed,
        validation=split.validation,
    )


def load_parallel_cold(cfg: Config, layout: RunLayout, split: Split):
    """(graphdef, variables) of the parallel-codes retriever of a cold-start split, its best
    checkpoint restored read-only, checked to have been trained on its codes file, this split and
    the config's `parallel` section (its inputs fingerprint); else an ArtifactError naming what
    is missing or stale and the command that trains it."""
    from seqmodel import sasrec
    from seqmodel.parallel import parallel_spec

    command = split.train_parallel_command(layout.root)
    path = layout.require(layout.parallel_cold_codes(split), command)
    try:
        codes = np.load(path)
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: cannot be read ({type(e).__name__}); `{command}`") from None
    ds = load_dataset(layout)
    h = parallel_cold_histories(ds, split, cfg.parallel)
    return sasrec.load_trained(
        cfg.parallel,
        layout.parallel_cold(split),
        h.train,
        h.valid_histories,
        h.valid_targets,
        len(ds.catalog),
        model=parallel_spec(cfg.parallel, codes),
        rebuild=command,
    )
