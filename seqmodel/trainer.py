"""The one training loop of every model we train: a jitted step built once, sharded batches under
a transfer guard, validation with early stopping, checkpoints, resume and metrics rows."""

import dataclasses
import functools
import inspect
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
from jax.sharding import Mesh
from tqdm.auto import tqdm

from data import atomic, runlock
from data.environment import differences, environment
from data.errors import ArgumentError, ArtifactError
from seqmodel import sharding
from seqmodel.checkpoint import Checkpoints, new_progress, record_validation, stopped
from seqmodel.files import CHECKPOINTS_DIR, METRICS_FILE, SUMMARY_FILE
from seqmodel.state import TrainState

# step(*bound, state, batch, ...) -> (state, metrics): a pure function of pytrees.
StepFn = Callable[..., tuple[TrainState, dict]]


@dataclasses.dataclass(frozen=True)
class PatienceChange:
    """What lets a run resume under another early-stopping patience (`start_or_resume`): the
    section of the caller's info file that holds its config, this run's patience, and this run's
    inputs key with any other patience."""

    section: str
    patience: int
    key_at: Callable[[int], str]

    def earlier(self, stored: dict) -> int | None:
        """The stored run's patience where its inputs differ from this run's in that alone."""
        cfg = stored.get(self.section)
        old = cfg.get("patience") if isinstance(cfg, dict) else None
        return old if type(old) is int and self.key_at(old) == stored.get("inputs") else None


@dataclasses.dataclass(frozen=True)
class Run:
    """A run's directory and identity: `info` is written to `info_file`, and a checkpoint resumes
    only under the same `info["inputs"]`; otherwise the run starts over (with one line naming
    `what` changed) or, with `refuse`, stops with that message."""

    workdir: Path
    info_file: str
    info: dict
    what: str
    patience_change: PatienceChange | None = None
    refuse: str | None = None


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When the loop validates, saves and stops."""

    total: int  # steps of the whole run
    eval_every: int  # validate (and save) every that many steps, and at the last one
    patience: int | None = None  # validations in a row without gain that end the run
    save_every: int | None = None  # also save (no validation) every that many steps
    stop_after: int | None = None  # end after that many steps in all, as a kill would (tests)

    @property
    def end(self) -> int:
        return self.total if self.stop_after is None else min(self.total, self.stop_after)

    def validates(self, step: int) -> bool:
        return step % self.eval_every == 0 or step == self.end

    def saves(self, step: int) -> bool:
        return self.validates(step) or bool(self.save_every and step % self.save_every == 0)

    def stopped(self, progress: dict) -> bool:
        return self.patience is not None and stopped(progress, self.patience)


@dataclasses.dataclass
class Fitted:
    """What `Trainer.fit` leaves: the final state and this call's account of the run."""

    state: TrainState
    step: int  # steps done in all, resumed ones included
    start: int  # the step this call resumed at
    total: int  # the schedule's length
    progress: dict  # the early-stopping record (checkpoint.new_progress)
    early_stopped: bool
    score: str | None  # the validation field that early-stops
    train_seconds: float  # this call's, validation and saves excluded
    seconds_before: float  # the run's training seconds up to the step this call resumed at
    tokens: int  # non-PAD input tokens this call trained on (steps whose metrics count them)

    @property
    def run_seconds(self) -> float:
        """The whole run's training seconds, resumed parts included (its metrics rows' clock)."""
        return self.seconds_before + self.train_seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.train_seconds, 1e-9)

    def summary(self) -> dict:
        """The run summary's common fields (train_summary.json)."""
        best = {}
        if self.score is not None:
            best = {
                "best_step": self.progress["best_step"],
                f"best_{self.score}": self.progress["best_recall"],
            }
        return {
            "steps": self.step,
            "total_steps": self.total,
            "early_stopped": self.early_stopped,
            **best,
            "train_seconds": self.run_seconds,
            "train_seconds_this_run": self.train_seconds,
        }


def _to_stderr(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


def loss_row(metrics: dict) -> dict:
    """A metrics row's fields from a step's host metrics: loss and gradient norm."""
    return {"loss": float(metrics["loss"]), "grad_norm": float(metrics["grad_norm"])}


class Trainer:
    """One model's training loop around `step(*bound, state, batch, **args, **static)`.

    The step is jitted once, with `bound` (graphdef, optimizer, ...) fixed by functools.partial
    and the state donated. `args` are device arguments of every call (seeds, a frozen backbone),
    replicated on the mesh once, here; `static_of(host batch)` gives the `static_argnames`
    values a batch compiles for (at most a few shapes). Batches are sharded along the mesh's
    `data` axis by an explicit device_put, so the loop runs under
    `jax.transfer_guard("disallow")`: a stray implicit copy is an error, not a slowdown.
    """

    def __init__(
        self,
        step: StepFn,
        *bound: Any,
        mesh: Mesh | None = None,
        args: dict | None = None,
        static_argnames: tuple[str, ...] = (),
        static_of: Callable[[Any], dict] | None = None,
    ):
        self.mesh = sharding.make_mesh() if mesh is None else mesh
        fn = functools.partial(step, *bound)
        # Arguments go in the step's own order (`step`), so the program is the one a positional
        # call compiles: keyword arguments would reorder its parameters.
        self._signature = inspect.signature(fn)
        self._jit = jax.jit(fn, donate_argnames="state", static_argnames=static_argnames)
        self._args = jax.device_put(dict(args or {}), sharding.replicated(self.mesh))
        self._static_of = static_of

    def replicate(self, state: Any) -> Any:
        """`state` (a pytree) on every device of the mesh: parameters are replicated."""
        return jax.device_put(state, sharding.replicated(self.mesh))

    def put(self, batch: Any) -> Any:
        """A host batch on the devices, split along the mesh's `data` axis."""
        return sharding.put_batch(batch, self.mesh)

    def step(self, state: Any, batch: Any, **static: Any) -> tuple[Any, dict]:
        """One jitted step on a device batch (`put`); `state` is donated."""
        call = self._signature.bind(state=state, batch=batch, **self._args, **static)
        return self._jit(*call.args, **call.kwargs)

    def fit(
        self,
        state: TrainState,
        batches: Iterator,
        run: Run,
        schedule: Schedule,
        *,
        validate: Callable[[TrainState], dict] | None = None,
        score: str | None = None,
        row: Callable[[dict], dict] = loss_row,
        log_steps: bool = True,
        desc: str = "train",
        show_progress: bool = True,
        log: Callable[[str], None] | None = None,
    ) -> Fitted:
        """Trains `state` on `batches` (a grain iterator, checkpointed with the state), resuming
        the run in `run.workdir`.

        Every `schedule.eval_every` steps (and at the last) `validate(state)` gives a row of
        fields, its `score` (higher is better) keeps the best checkpoint and counts towards
        early stopping; then the rows up to that step reach metrics.jsonl, and only then are the
        state, the iterator position and the early-stopping record saved, so that every
        checkpoint's rows are on disk however the process ends. `row(host metrics)` gives each
        step's row; metrics.jsonl gets every step's row and each validation's, or with `log_steps`
        False one row per save (the step's fields and the validation's together). Only process
        0 writes the run's files.
        """
        workdir = Path(run.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        lead = jax.process_index() == 0
        state = self.replicate(state)
        ckpts, state, progress, step, seconds_before = start_or_resume(
            run, state, batches, lead=lead, log=log or tqdm.write
        )
        start, end = step, schedule.end
        if start and lead:
            # By default on stderr: a command's stdout is its JSON summary.
            (log or _to_stderr)(f"resumed from step {start} of {schedule.total}")
        metrics_path = workdir / METRICS_FILE
        bar = tqdm(
            total=schedule.total, initial=step, desc=desc, unit="step", disable=not show_progress
        )
        pending, window, seconds, tokens_seen = None, [], 0.0, 0
        t0 = time.perf_counter()
        # Implicit host<->device copies in the hot loop are bugs (a stray float() or numpy operand).
        with jax.transfer_guard("disallow"):
            while step < end and not schedule.stopped(progress):
                host = next(batches)
                static = self._static_of(host) if self._static_of else {}
                state, metrics = self.step(state, self.put(host), **static)
                step += 1
                # The host reads step t-1's metrics while step t runs.
                if pending is not None:
                    window.append(_host_row(row, *pending))
                pending = (step, metrics)
                if schedule.saves(step):
                    window.append(_host_row(row, *pending))
                    pending = None
                    # Per-window throughput (non-PAD input tokens), validation time excluded.
                    elapsed = time.perf_counter() - t0
                    tokens = sum(r.pop("tokens", 0) for r in window)
                    seconds, tokens_seen = seconds + elapsed, tokens_seen + tokens
                    last = window[-1]
                    if tokens:
                        last["tokens_per_s"] = tokens / max(elapsed, 1e-9)
                    last["train_seconds"] = seconds_before + seconds
                    result, better = {}, False
                    if validate is not None and schedule.validates(step):
                        result = validate(state)
                        if score is not None:
                            better = record_validation(progress, step, result[score])
                        window.append({"step": step, **result})
                    # Rows first, then the checkpoint: a kill between the two leaves rows past the
                    # newest checkpoint, which the resume trims (start_or_resume) and writes
                    # again. The other order would commit a step whose rows die with the process
                    # (a Ctrl-C held by the save is raised as it ends): a hole in the log.
                    if lead:
                        append_metrics(metrics_path, window if log_steps else [{**last, **result}])
                    ckpts.save(step, state, batches, dict(progress), best=better)
                    bar.set_postfix(_postfix(last, elapsed, tokens, result, score))
                    window = []
                    t0 = time.perf_counter()
                elif step % 10 == 0 and window:
                    tokens = sum(r.get("tokens", 0) for r in window)
                    elapsed = time.perf_counter() - t0
                    bar.set_postfix(_postfix(window[-1], elapsed, tokens, {}, None))
                bar.update(1)
        bar.close()
        finish(ckpts, workdir)
        return Fitted(
            state=state,
            step=step,
            start=start,
            total=schedule.total,
            progress=progress,
            early_stopped=schedule.stopped(progress),
            score=score,
            train_seconds=seconds,
            seconds_before=seconds_before,
            tokens=tokens_seen,
        )


def _host_row(row: Callable[[dict], dict], step: int, metrics: dict) -> dict:
    return {"step": step, **row(jax.device_get(metrics))}


def _postfix(last: dict, elapsed: float, tokens: int, result: dict, score: str | None) -> dict:
    """The progress bar's loss, tokens/s and validation score."""
    out = {"loss": f"{last['loss']:.3f}"} if "loss" in last else {}
    if tokens:
        out["tok_s"] = f"{tokens / max(elapsed, 1e-9):,.0f}"
    if score in result:
        out[score] = f"{result[score]:.4f}"
    return out


def best_state(workdir: Path | str, abstract_state: Any) -> TrainState:
    """The best checkpoint's state of a run in `workdir` (else its newest one that restores)."""
    ckpts = Checkpoints(Path(workdir) / CHECKPOINTS_DIR)
    try:
        return ckpts.restore_best_params(abstract_state)
    finally:
        ckpts.close()


def start_or_resume(
    run: Run, state: TrainState, iterator, *, lead: bool, log: Callable[[str], None] = tqdm.write
):
    """(checkpoints, state, progress, step, seconds_before) of `run`; seconds_before: the training
    seconds its metrics log holds up to the resumed step, so a resumed run's clock counts the
    whole run.

    A run made from other inputs (info["inputs"] differs from the one in `run.info_file`) is
    dropped with one line (or refused, `run.refuse`); otherwise the newest checkpoint that
    restores is resumed (None restores: each was set aside with one line, and the fresh `state`
    starts over). Writes `run.info_file` and trims the metrics log to the resumed step. The lead
    process holds the directory's run lock (data.runlock) from here until `finish`.

    Early stopping's patience only decides when training ends, never what a step computes, so a
    run whose inputs differ from these in their patience alone (`run.patience_change`) is
    resumed; the loop decides whether it has stopped from its count of validations without gain
    (`checkpoint.stopped`), so a run stopped under a patience of 10 goes on under 20 as if it had
    been made with 20 from the start.
    """
    workdir, info = Path(run.workdir), run.info
    path = workdir / run.info_file
    stored = _read_info(path)
    changed = stored is not None and stored.get("inputs") != info["inputs"]
    if changed and run.refuse:
        raise ArgumentError(f"{workdir}: {run.refuse}")
    if lead:  # a second process resuming the same run is refused (data.runlock); `finish` frees it
        runlock.hold(workdir)
    if changed and lead:
        change = run.patience_change
        old = change.earlier(stored) if change else None
        if old is not None:
            log(f"{workdir}: patience {old} -> {change.patience}; resuming the same run")
        else:
            _start_over(workdir, run.info_file, run.what, log)
    ckpts = Checkpoints(workdir / CHECKPOINTS_DIR)
    progress = new_progress()
    if ckpts.latest_step() is not None:
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
        )
        restored = ckpts.restore_latest(abstract, iterator)
        if restored is not None:
            state, stored_progress = restored
            if missing := sorted(set(progress) - set(stored_progress)):
                raise ArtifactError(
                    f"{ckpts.directory}/latest/{ckpts.latest_step()}: its progress record lacks "
                    f"{', '.join(missing)}; delete {ckpts.directory} to train from step 0"
                )
            # Older checkpoints also stored a stop flag: it is decided anew instead.
            progress = {k: stored_progress[k] for k in progress}
    step = int(jax.device_get(state.step))
    metrics_path = workdir / METRICS_FILE
    rows = read_metrics(metrics_path, step)
    # The environments this run has trained in, oldest first: a resume under other library
    # versions is said in one line, since its numbers need not equal a run made in one go.
    envs = _environments(stored) if step else []
    now = environment()
    if envs and (diff := differences(envs[-1], now)) and lead:
        log(
            f"{workdir}: resuming in another environment than step {step} was trained in "
            f"({'; '.join(diff)}); the result may differ from an uninterrupted run's"
        )
    if not envs or envs[-1] != now:
        envs = [*envs, now]
    if lead:
        atomic.write_json(path, {**info, "environments": envs})
        atomic.write_text(metrics_path, "".join(json.dumps(r) + "\n" for r in rows))
    seconds_before = max((r.get("train_seconds", 0.0) for r in rows), default=0.0)
    return ckpts, state, progress, step, seconds_before


def finish(ckpts: Checkpoints, workdir: Path) -> None:
    """Ends a loop begun by `start_or_resume`: waits for the last save, closes the checkpoint
    managers and frees the run lock."""
    ckpts.wait()
    ckpts.close()
    runlock.release(workdir)


def _start_over(workdir: Path, info_file: str, what: str, log: Callable[[str], None]) -> None:
    log(f"{workdir}: {what} changed since it was trained; retraining it from scratch")
    shutil.rmtree(workdir / CHECKPOINTS_DIR, ignore_errors=True)
    for name in (METRICS_FILE, SUMMARY_FILE, info_file):
        (workdir / name).unlink(missing_ok=True)


def _read_info(path: Path) -> dict | None:
    """A run's info file; None where there is none, {} where it cannot be read (the run then
    starts over, as one made from other inputs)."""
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _environments(info: dict | None) -> list[dict]:
    """The environments a run's info file (as `_read_info` gave it) lists, oldest first."""
    envs = (info or {}).get("environments", [])
    return envs if isinstance(envs, list) else []


def read_metrics(path: Path, upto_step: int | None = None) -> list[dict]:
    """Logged rows (up to a resumed step); a line cut short by a kill is dropped."""
    upto_step = float("inf") if upto_step is None else upto_step
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("step", upto_step + 1) <= upto_step:
            rows.append(row)
    return rows


def append_metrics(path: Path, rows: list[dict]) -> None:
    """Adds rows to a metrics log (one JSON object a line), on disk before it returns: the
    checkpoint saved next must not outlive them."""
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        f.flush()
        os.fsync(f.fileno())
