"""The `genret pipeline` workflow: the same stage functions the commands call, in one process,
each skipped while its key matches and its outputs still load (the ledger)."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from data.prepared import stored_key
from experiments import config as config_lib
from experiments.config import Config, warm_run_config
from experiments.pipeline import ledger, stages
from experiments.pipeline.artifacts import load_json_result, load_retriever
from experiments.pipeline.layout import RunLayout, Split
from rqvae.config import identity_fields as rqvae_identity_fields
from seqmodel.config import identity_fields

# Eval fields that choose which stages run, not what a stage computes: in no key.
_STAGE_CHOICE_FIELDS = ("cold", "warm", "warm_preset", "sasrec")
# The prefix of the leave-one-out part's stages when it runs as another preset (eval.warm_preset).
WARM_RUN_PREFIX = "loo/"


def build_stages(cfg: Config, layout: RunLayout, *, progress: bool = True) -> list[ledger.Stage]:
    """Tokenizer, per-fraction retrievers and evaluations, leave-one-out, with their keys."""
    # The prepared data enter the keys by their content key: two writes of the same records
    # differ in bytes.
    rq = rqvae_identity_fields(cfg.rqvae)
    out = [
        ledger.Stage(
            "tokenizer",
            (stored_key(layout.prepared), rq),
            (layout.sids,),
            lambda: stages.train_tokenizer(cfg, layout, progress=progress),
            check=lambda: stages.load_sids(cfg, layout, stages.load_dataset(layout)),
        )
    ]
    seq = identity_fields(cfg.seqmodel)
    # Each evaluation's key holds the eval fields it reads: the cold-start ones never read
    # warm_*, the leave-one-out one never reads cold_*.
    eval_fields = {
        k: v for k, v in dataclasses.asdict(cfg.eval).items() if k not in _STAGE_CHOICE_FIELDS
    }
    cold_eval = {k: v for k, v in eval_fields.items() if not k.startswith("warm_")}
    warm_eval = {k: v for k, v in eval_fields.items() if not k.startswith("cold_")}
    ev = (cold_eval, dataclasses.asdict(cfg.decode))

    def retriever(split: Split, key_parts: tuple) -> ledger.Stage:
        return ledger.Stage(
            f"retriever_{split.name}",
            key_parts,
            (layout.retriever_summary(split),),
            lambda: stages.train_retriever(cfg, layout, split, progress=progress),
            after=("tokenizer",),
            check=lambda: load_retriever(layout, split),
        )

    for p in cfg.eval.cold_start_fractions if cfg.eval.cold else ():
        split = Split("cold", p)
        result = layout.cold_start_result(p)
        out.append(retriever(split, (seq, p)))
        out.append(
            ledger.Stage(
                f"eval_cold_{p:g}",
                ev,
                (result,),
                lambda p=p: stages.evaluate_cold_start(cfg, layout, p, progress=progress),
                after=(f"retriever_{split.name}",),
                check=lambda result=result: load_json_result(result),
                alone=True,  # latency per user
            )
        )
    if cfg.eval.warm and cfg.eval.warm_preset:
        out += _warm_run_stages(cfg, layout, progress=progress)
    elif cfg.eval.warm:
        # The main retriever, then each ensemble member: the same config but its seed.
        members = [Split("loo")] + [Split("loo", seed=s) for s in cfg.eval.warm_ensemble_seeds]
        for m in members:
            out.append(retriever(m, (identity_fields(m.retriever_config(cfg.seqmodel)),)))
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
    return out


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


class _StageProcess:
    """A stage run by `python -m experiments.pipeline.stage_worker` (ledger.StageProcess)."""

    def __init__(self, cfg: Config, layout: RunLayout, stage: ledger.Stage):
        fd, name = tempfile.mkstemp(prefix="genret-stage-", suffix=".txt")
        os.close(fd)
        self._error = Path(name)
        command = [
            sys.executable,
            "-m",
            "experiments.pipeline.stage_worker",
            str(layout.root),
            stage.name,
        ]
        self._process = subprocess.Popen(
            [*command, "--error-file", str(self._error)], stdin=subprocess.PIPE, text=True
        )
        try:
            self._process.stdin.write(json.dumps(config_lib.to_dict(cfg)))
            self._process.stdin.close()
        except BrokenPipeError:  # it ended before reading: its exit code says why
            pass

    def poll(self) -> int | None:
        return self._process.poll()

    def interrupt(self, grace: float = 2.0) -> None:
        # A Ctrl-C at the terminal reaches it too (the same process group): `grace` seconds to
        # stop by that one; then SIGTERM, which the worker honours as a Ctrl-C even where it
        # ignores SIGINT (a background job), and which a checkpoint save in flight holds as it
        # holds the first Ctrl-C, never taking it for a second.
        try:
            self._process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 300.0) -> int:
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return self._process.wait()

    def error(self) -> str:
        code = self._process.poll()
        text = self._error.read_text().strip() if self._error.exists() else ""
        self._error.unlink(missing_ok=True)
        if text:
            return text
        if code is not None and code < 0:
            hint = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
            return f"its process ended by signal {-code}{hint}"
        return f"its process ended with exit code {code}"

    def __del__(self):
        self._error.unlink(missing_ok=True)


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
    log("[prepare] running (reuses the prepared dataset when inputs are unchanged)")
    stages.prepare(cfg, layout, progress=progress)
    stages.save_config(cfg, layout)
    if cfg.eval.warm and cfg.eval.warm_preset:
        warm_cfg, warm = warm_run_config(cfg), layout.warm_run
        log(f"[prepare] the leave-one-out part: {warm_cfg.name} in {warm.root}")
        stages.prepare(warm_cfg, warm, progress=progress)
        stages.save_config(warm_cfg, warm)
    ledger.run_stages(
        build_stages(cfg, layout, progress=progress),
        layout.ledger,
        log=log,
        on_done=lambda _: stages.save_config(cfg, layout),
        jobs=effective_jobs(cfg, log),
        launch=lambda stage: _StageProcess(cfg, layout, stage),
    )
    stages.write_report(cfg, layout)
    log(f"[pipeline] done in {time.perf_counter() - start:.1f} s; report: {layout.report}")
    return layout.report
