"""Every orbax call of the retriever: latest and best checkpoints of state + data iterator."""

from collections.abc import Callable
from pathlib import Path

import grain
import orbax.checkpoint as ocp

from data.errors import ArtifactError
from rqvae.checkpoint import (
    DAMAGED,
    attempt,
    log_to_stderr,
    quiet_orbax,
    saving,
    set_aside,
)


class Checkpoints:
    """Two managers under `directory`: `latest` (the two newest saves) and `best` (best validation).

    A checkpoint that fails to restore (a truncated or missing file) is moved to
    `directory/damaged/<latest|best>-<step>` with one line to `log`, and the next one is tried.
    With `read_only` (evaluation, serving) nothing is created or moved: a damaged checkpoint is
    an ArtifactError naming it.
    """

    def __init__(
        self,
        directory: Path,
        *,
        log: Callable[[str], None] = log_to_stderr,
        read_only: bool = False,
        rebuild: str = "retrain it",
    ):
        self.directory = Path(directory).resolve()
        self._log = log
        self.read_only, self._rebuild = read_only, rebuild
        with quiet_orbax():
            # Two latest ones, so that a damaged newest one leaves something to resume from.
            self.latest = _manager(self.directory / "latest", max_to_keep=2, create=not read_only)
            self.best = _manager(self.directory / "best", max_to_keep=1, create=not read_only)

    def save(self, step: int, state, iterator, progress: dict, *, best: bool) -> None:
        """Saves the state, the grain iterator position and the loop's progress record."""
        # The best one first, committed before the latest one starts: a resume restores the
        # latest one, whose progress record names its best step, so that step must be in best/
        # however the process ends (a kill between two concurrent commits could lose it).
        managers = [self.best, self.latest] if best else [self.latest]
        with saving(self.directory):
            for manager in managers:
                manager.save(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardSave(state),
                        data=grain.checkpoint.CheckpointSave(iterator),
                        progress=ocp.args.JsonSave(progress),
                    ),
                )
                # Each must finish before the next save donates (invalidates) the state
                # buffers; a Ctrl-C meanwhile is held so no step is left half-written.
                manager.wait_until_finished()

    def latest_step(self) -> int | None:
        return self.latest.latest_step()

    def restore_latest(self, abstract_state, iterator) -> tuple | None:
        """(state, progress) of the newest latest checkpoint that restores, with `iterator` at
        its position; None, and `iterator` untouched, when none does (start over)."""
        start = iterator.get_state()
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state),
            data=grain.checkpoint.CheckpointRestore(iterator),
            progress=ocp.args.JsonRestore(),
        )
        steps = self._steps("latest")
        for i, (name, step) in enumerate(steps):
            out, error = attempt(lambda step=step: self.latest.restore(step, args=args))
            if out is not None:
                self._drop_best_after(step)
                return out["state"], out["progress"]
            self._set_aside(name, step, error, steps[i + 1 :], last="starting from step 0")
        iterator.set_state(start)  # a failed attempt may have moved it
        self._drop_best_after(0)
        return None

    def restore_best_params(self, abstract_state):
        """The best checkpoint's state; else (no validation ran, or it is damaged) the newest
        latest one that restores. FileNotFoundError when none does."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))
        steps = self._steps("best", "latest")
        for i, (name, step) in enumerate(steps):
            manager = getattr(self, name)
            out, error = attempt(lambda m=manager, step=step: m.restore(step, args=args))
            if out is not None:
                return out["state"]
            self._set_aside(name, step, error, steps[i + 1 :], last="none left")
        why = "none restores (see the lines above)" if steps else "none saved"
        raise FileNotFoundError(f"{self.directory}: no usable checkpoint, {why}; train again")

    def best_params_step(self) -> int | None:
        """The step `restore_best_params` reads first (its best, else its newest latest one):
        after it returned, the step it restored, as those that failed were set aside."""
        steps = self._steps("best", "latest")
        return steps[0][1] if steps else None

    def wait(self) -> None:
        with saving(self.directory):
            self.latest.wait_until_finished()
            self.best.wait_until_finished()

    def close(self) -> None:
        with saving(self.directory):
            self.latest.close()
            self.best.close()

    def _steps(self, *names: str) -> list[tuple[str, int]]:
        """(manager name, step) pairs to try in order: each manager's newest step first."""
        with quiet_orbax():  # orbax logs each step folder whose metadata it cannot parse
            return [
                (name, step)
                for name in names
                for step in sorted(getattr(self, name).all_steps(), reverse=True)
            ]

    def _set_aside(self, name: str, step: int, error: str, rest: list, *, last: str) -> None:
        """Moves a checkpoint that did not restore to damaged/, naming what is tried next."""
        if self.read_only:
            raise ArtifactError(
                f"{self.directory / name / str(step)}: cannot restore ({error}); left in place "
                f"(a reader changes nothing); {self._rebuild}"
            )
        then = f"trying {rest[0][0]} step {rest[0][1]}" if rest else last
        dest = self.directory / DAMAGED / f"{name}-{step}"
        with quiet_orbax():
            set_aside(getattr(self, name), step, dest, error, then=then, log=self._log)

    def _drop_best_after(self, step: int) -> None:
        # Training goes on from `step`: a best checkpoint saved after it belongs to the abandoned
        # run and would block (orbax skips saves at or before its newest step) the new one.
        for s in self.best.all_steps():
            if s > step:
                self.best.delete(s)


def _manager(directory: Path, *, max_to_keep: int, create: bool) -> ocp.CheckpointManager:
    # Both managers save the same step at once: on several hosts their barriers (named after
    # the step) must not collide, hence a prefix per manager.
    multiprocessing = ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=directory.name)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=create, multiprocessing_options=multiprocessing
    )
    return ocp.CheckpointManager(directory, options=options)


def new_progress() -> dict:
    """A training loop's early-stopping record, as its checkpoints store it."""
    return {"best_recall": -1.0, "best_step": 0, "bad_evals": 0}


def record_validation(progress: dict, step: int, recall: float) -> bool:
    """Early-stopping bookkeeping of one validation; True when it is the best so far."""
    better = recall > progress["best_recall"]
    if better:
        progress.update(best_recall=recall, best_step=step, bad_evals=0)
    else:
        progress["bad_evals"] += 1
    return better


def stopped(progress: dict, patience: int) -> bool:
    """Whether early stopping has ended the run: `patience` validations in a row without gain.
    Decided from the record each time, never stored, so a run goes on under a larger patience."""
    return progress["bad_evals"] >= patience
