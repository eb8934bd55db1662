"""The `genret pipeline` workflow: which stages run and with which keys, and running them (one at
a time here, or side by side in worker processes), each skipped while its key matches and its
outputs still load (the ledger)."""

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from data.errors import GenretError, StageError
from data.prepared import stored_key
from experiments.config import Config, warm_run_config
from experiments.pipeline import ledger, stage_worker, stages
from experiments.pipeline.artifacts import (
    load_json_result,
    load_parallel_cold,
    load_retriever,
)
from experiments.pipeline.layout import RunLayout, Split
from experiments.pipeline.ledger import Ledger, Stage, one_line, stage_keys
from rqvae.config import identity_fields as rqvae_identity_fields
from rqvae.embed import embedding_fields
from seqmodel.config import identity_fields

# Eval fields that choose which stages run, not what a stage computes: in no key.
_STAGE_CHOICE_FIELDS = ("cold", "warm", "warm_preset", "sasrec", "parallel")
# Cold-start fields that enter the evaluations' keys only when not at their default, so that work
# directories evaluated before the field existed keep their keys.
_KEYED_WHEN_SET = ("cold_parallel", "cold_content_recent", "cold_content_decay")
# The prefix of the leave-one-out part's stages when it runs as another preset (eval.warm_preset).
WARM_RUN_PREFIX = "loo/"


def build_stages(cfg: Config, layout: RunLayout, *, progress: bool = True) -> list[ledger.Stage]:
    """Tokenizer, per-fraction retrievers (with eval.cold_parallel, also parallel-codes ones) and
    evaluations, leave-one-out, the item-position models (SASRec, parallel codes), with their
    keys; the tokenizer only where a stage reads its SIDs or its key."""
    # The prepared data enter the keys by their content key: two writes of the same records
    # differ in bytes.
    rq = rqvae_identity_fields(cfg.rqvae)
    out = []
    if cfg.eval.cold or cfg.eval.warm or cfg.eval.sasrec:
        out.append(
            ledger.Stage(
                "tokenizer",
                (stored_key(layout.prepared), rq),
                (layout.sids,),
                lambda: stages.train_tokenizer(cfg, layout, progress=progress),
                check=lambda: stages.load_sids(cfg, layout, stages.load_dataset(layout)),
            )
        )
    seq = identity_fields(cfg.seqmodel)
    # Each evaluation's key holds the eval fields it reads: the cold-start ones never read
    # warm_*, the leave-one-out one never reads cold_*.
    eval_fields = {
        k: v for k, v in dataclasses.asdict(cfg.eval).items() if k not in _STAGE_CHOICE_FIELDS
    }
    cold_eval = {k: v for k, v in eval_fields.items() if not k.startswith("warm_")}
    defaults = {f.name: f.default for f in dataclasses.fields(cfg.eval)}
    for k in _KEYED_WHEN_SET:
        if cold_eval[k] == defaults[k]:
            del cold_eval[k]
    warm_eval = {k: v for k, v in eval_fields.items() if not k.startswith("cold_")}
    ev = (cold_eval, dataclasses.asdict(cfg.decode))

    def retriever(split: Split, key_parts: tuple, after=("tokenizer",)) -> ledger.Stage:
        return ledger.Stage(
            f"retriever_{split.name}",
            key_parts,
            (layout.retriever_summary(split),),
            lambda: stages.train_retriever(cfg, layout, split, progress=progress),
            after=after,
            check=lambda: load_retriever(layout, split, read_only=False),
        )

    for p in cfg.eval.cold_start_fractions if cfg.eval.cold else ():
        split = Split("cold", p)
        result = layout.cold_start_result(p)
        out.append(retriever(split, (seq, p)))
        upstream = (f"retriever_{split.name}",)
        if cfg.eval.cold_parallel:
            out.append(_parallel_cold_stage(cfg, layout, split, progress=progress))
            upstream += (out[-1].name,)
        out.append(
            ledger.Stage(
                f"eval_cold_{p:g}",
                ev,
                (result,),
                lambda p=p: stages.evaluate_cold_start(cfg, layout, p, progress=progress),
                after=upstream,
                check=lambda result=result: load_json_result(result),
                alone=True,  # latency per user
            )
        )
    if cfg.eval.warm and cfg.eval.warm_preset:
        out += _warm_run_stages(cfg, layout, progress=progress)
    elif cfg.eval.warm:
        # The main retriever, then each ensemble member: the same config but its seed.
        members = [Split("loo")] + [Split("loo", seed=s) for s in cfg.eval.warm_ensemble_seeds]
        after = ("tokenizer",)
        if cfg.seqmodel.sasrec_teacher:
            # SASRec and its next-item table first, once, for every member to read.
            out.append(
                ledger.Stage(
                    "sasrec_teacher",
                    (
                        stored_key(layout.prepared),
                        identity_fields(cfg.sasrec),
                        cfg.seqmodel.sasrec_teacher,
                    ),
                    (layout.sasrec_next_items(cfg.seqmodel.sasrec_teacher),),
                    lambda: stages.sasrec_teacher(cfg, layout, progress=progress),
                    after=(),  # the prepared dataset, in its key
                )
            )
            after += ("sasrec_teacher",)
        for m in members:
            out.append(retriever(m, (identity_fields(m.retriever_config(cfg.seqmodel)),), after))
        out.append(
            ledger.Stage(
                "eval_warm",
                (warm_eval, ev[1]),
                (layout.warm_result,),
                lambda: stages.evaluate_warm(cfg, layout, progress=progress),
                after=tuple(f"retriever_{m.name}" for m in members),
                check=lambda: load_json_result(layout.warm_result),
                alone=True,  # latency per user
            )
        )
    if cfg.eval.sasrec:
        out.append(
            ledger.Stage(
                "sasrec",
                (identity_fields(cfg.sasrec),),
                (layout.sasrec_result,),
                lambda: stages.sasrec(cfg, layout, progress=progress),
                after=("tokenizer",),  # only the prepared dataset, which the tokenizer key holds
                check=lambda: load_json_result(layout.sasrec_result),
                alone=True,  # latency per user
            )
        )
    if cfg.eval.parallel:
        out.append(
            ledger.Stage(
                "parallel",
                (
                    stored_key(layout.prepared),
                    embedding_fields(cfg.rqvae),
                    _cooccurrence_fields(cfg.rqvae),
                    identity_fields(cfg.parallel),
                ),
                (layout.parallel_result,),
                lambda: stages.parallel(cfg, layout, progress=progress),
                after=(),  # the prepared dataset and the text embeddings, both in its key
                check=lambda: load_json_result(layout.parallel_result),
                alone=True,  # latency per user
            )
        )
    return out


def _parallel_cold_stage(
    cfg: Config, layout: RunLayout, split: Split, *, progress: bool
) -> ledger.Stage:
    """parallel_cold_<p>: the parallel-codes retriever of a cold-start split (eval.cold_parallel),
    keyed as the `parallel` stage (prepared data, text embeddings, co-occurrence part, the
    `parallel` section) and by its fraction; it reads no SIDs, so it waits on no stage."""
    return ledger.Stage(
        f"parallel_{split.name}",
        (
            stored_key(layout.prepared),
            embedding_fields(cfg.rqvae),
            _cooccurrence_fields(cfg.rqvae),
            identity_fields(cfg.parallel),
            split.fraction,
        ),
        (layout.parallel_cold_summary(split),),
        lambda: stages.train_parallel_cold(cfg, layout, split, progress=progress),
        after=(),
        check=lambda: load_parallel_cold(cfg, layout, split),
    )


def _cooccurrence_fields(rq) -> dict:
    """The tokenizer fields that decide the parallel codes' collaborative part (none without)."""
    if not rq.cf_dim:
        return {}
    return {
        "cf_dim": rq.cf_dim,
        "cf_weight": rq.cf_weight,
        "cf_window": rq.cf_window,
        "seed": rq.seed,
    }


def _warm_run_stages(cfg: Config, layout: RunLayout, *, progress: bool) -> list[ledger.Stage]:
    """The leave-one-out part as the `eval.warm_preset` run in WORKDIR/loo: that run's own stages
    (prefixed `loo/`, keyed by its config and its prepared data alone), then the copy of its
    results/warm.json into this run's results."""
    warm = layout.warm_run
    nested = [
        dataclasses.replace(
            st,
            name=WARM_RUN_PREFIX + st.name,
            after=tuple(WARM_RUN_PREFIX + a for a in st.after) if st.after is not None else (),
        )
        for st in build_stages(warm_run_config(cfg), warm, progress=progress)
    ]
    copy = ledger.Stage(
        "eval_warm",
        (str(warm.root),),
        (layout.warm_result,),
        lambda: stages.copy_warm_result(warm, layout),
        after=(WARM_RUN_PREFIX + "eval_warm",),
        check=lambda: load_json_result(layout.warm_result),
        alone=True,  # a file copy: not worth a process
    )
    return [*nested, copy]


class StageProcess(Protocol):
    """A stage running in its own process (`run_stages(..., launch=)`)."""

    def poll(self) -> int | None:
        """Its exit code once it ended, else None."""

    def interrupt(self) -> None:
        """Asks it to stop as Ctrl-C would (a training stage keeps its last checkpoint)."""

    def wait(self) -> int:
        """Waits for its end; its exit code."""

    def error(self) -> str:
        """After a non-zero exit: why, on one line."""


def run_stages(
    stages: list[Stage],
    ledger_path: Path,
    log: Callable[[str], None] = print,
    on_done: Callable[[Stage], None] | None = None,
    *,
    jobs: int = 1,
    launch: Callable[[Stage], StageProcess] | None = None,
) -> dict:
    """Runs the stages that are out of date; returns each stage's seconds (0 when skipped).

    In list order, one at a time, in this process; or, with `launch` and `jobs` > 1, up to
    `jobs` at once, each in the process `launch(stage)` starts, a stage starting once every
    stage it comes after has finished (the first ready in list order first; a stage `alone`
    only while no other runs, in this process, and none beside it). The ledger is
    written by this process alone, one entry as each stage finishes. A stage's failure is
    raised as a StageError naming the stage (its cause chained); a stage running beside it is
    interrupted first. `on_done(stage)` runs after each stage that ran and finished.
    """
    ledger = Ledger(ledger_path)
    after, keys = stage_keys(stages)
    apart = launch is not None and jobs > 1
    timings: dict[str, float] = {}
    waiting = list(stages)
    running: dict[str, tuple[Stage, StageProcess, float]] = {}
    try:
        while waiting or running:
            # Start what is ready, the first in list order first (one at a time: the next in
            # list order); a stage `alone` only when nothing runs, here, so nothing beside it.
            while len(running) < jobs:
                ready = [s for s in waiting if all(a in timings for a in after[s.name])]
                ready = [s for s in ready if not (s.alone and running)]
                if not ready:
                    break
                stage = ready[0]
                waiting.remove(stage)
                key = keys[stage.name]
                if ledger.up_to_date(stage, key, log):
                    log(f"[{stage.name}] up to date, skipped")
                    timings[stage.name] = 0.0
                elif stage.alone or not apart:
                    timings[stage.name] = _run_here(stage, ledger, key, log, on_done)
                else:
                    log(f"[{stage.name}] running (in its own process)")
                    running[stage.name] = (stage, launch(stage), time.perf_counter())
            if not running:  # all left were skipped or ran here (an `after` names an earlier stage)
                break
            stage, process, start = running.pop(_first_to_end(running))
            if process.poll() != 0:
                raise StageError(f"stage {stage.name}: {process.error()}")
            seconds = time.perf_counter() - start
            _finished(stage, ledger, keys[stage.name], seconds, on_done, log)
            timings[stage.name] = seconds
    finally:  # a failure or Ctrl-C here: the stages still running stop as Ctrl-C stops them
        for _, process, _ in running.values():
            if process.poll() is None:
                process.interrupt()
        for _, process, _ in running.values():
            process.wait()
    return timings


def _run_here(stage: Stage, ledger: Ledger, key: str, log, on_done) -> float:
    """Runs a stage in this process; its seconds."""
    log(f"[{stage.name}] running")
    start = time.perf_counter()
    try:
        stage.run()
    except GenretError as e:
        raise StageError(f"stage {stage.name}: {e}") from e
    except (ValueError, OSError, MemoryError) as e:
        raise StageError(f"stage {stage.name}: {one_line(e)}") from e
    seconds = time.perf_counter() - start
    _finished(stage, ledger, key, seconds, on_done, log)
    return seconds


def _finished(stage: Stage, ledger: Ledger, key: str, seconds: float, on_done, log) -> None:
    missing = [str(p) for p in stage.outputs if not p.exists()]
    if missing:
        raise StageError(f"stage {stage.name} finished without writing {missing}")
    ledger.record(stage, key, seconds)
    if on_done is not None:
        on_done(stage)
    log(f"[{stage.name}] done in {seconds:.1f} s")


def _first_to_end(running: dict, interval: float = 0.05) -> str:
    """The name of a running stage whose process has ended (waits for one)."""
    while True:
        for name, (_, process, _) in running.items():
            if process.poll() is not None:
                return name
        time.sleep(interval)


def effective_jobs(cfg: Config, log: Callable[[str], None] = print) -> int:
    """cfg.jobs where stages can run side by side: on a CPU and in one process (on an
    accelerator two processes would hold one device's memory twice); else 1, said once."""
    if cfg.jobs == 1:
        return 1
    import jax

    if jax.process_count() > 1 or jax.default_backend() != "cpu":
        log(f"[pipeline] jobs={cfg.jobs}: one stage at a time on {jax.default_backend()}")
        return 1
    return cfg.jobs


def run_pipeline(
    cfg: Config, layout: RunLayout, *, progress: bool = True, log: Callable[[str], None] = print
) -> Path:
    """Prepares (self-caching), runs the stages that are out of date, writes the report."""
    start = time.perf_counter()
    Ledger(layout.ledger)  # a damaged one is refused before any work
    log("[prepare] running (reuses the prepared dataset when inputs are unchanged)")
    stages.prepare(cfg, layout, progress=progress)
    stages.save_config(cfg, layout)
    if cfg.eval.warm and cfg.eval.warm_preset:
        warm_cfg, warm = warm_run_config(cfg), layout.warm_run
        log(f"[prepare] the leave-one-out part: {warm_cfg.name} in {warm.root}")
        stages.prepare(warm_cfg, warm, progress=progress)
        stages.save_config(warm_cfg, warm)
    run_stages(
        build_stages(cfg, layout, progress=progress),
        layout.ledger,
        log=log,
        on_done=lambda _: stages.save_config(cfg, layout),
        jobs=effective_jobs(cfg, log),
        launch=lambda stage: stage_worker.StageProcess(cfg, layout, stage),
    )
    stages.write_report(cfg, layout)
    log(f"[pipeline] done in {time.perf_counter() - start:.1f} s; report: {layout.report}")
    return layout.report
