"""Every orbax call of the retriever: latest and best checkpoints of state + data iterator."""

from pathlib import Path

import grain
import orbax.checkpoint as ocp


class Checkpoints:
    """Two managers under `directory`: `latest` (the newest save) and `best` (best validation)."""

    def __init__(self, directory: Path):
        directory = Path(directory).resolve()
        options = ocp.CheckpointManagerOptions(max_to_keep=1, create=True)
        self.latest = ocp.CheckpointManager(directory / "latest", options=options)
        self.best = ocp.CheckpointManager(directory / "best", options=options)

    def save(self, step: int, state, iterator, progress: dict, *, best: bool) -> None:
        """Saves the state, the grain iterator position and the loop's progress record."""
        managers = [self.latest, self.best] if best else [self.latest]
        for manager in managers:
            manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state),
                    data=grain.checkpoint.CheckpointSave(iterator),
                    progress=ocp.args.JsonSave(progress),
                ),
            )
        # Both managers must finish before the next save donates (invalidates) the state buffers.
        self.wait()

    def latest_step(self) -> int | None:
        return self.latest.latest_step()

    def restore_latest(self, abstract_state, iterator):
        """Restores the state into the abstract target (shapes, shardings) and the iterator."""
        step = self.latest.latest_step()
        out = self.latest.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state),
                data=grain.checkpoint.CheckpointRestore(iterator),
                progress=ocp.args.JsonRestore(),
            ),
        )
        return out["state"], out["progress"]

    def restore_best_params(self, abstract_state):
        """The best checkpoint's state (falls back to the latest when no validation ran)."""
        manager = self.best if self.best.latest_step() is not None else self.latest
        out = manager.restore(
            manager.latest_step(),
            args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state)),
        )
        return out["state"]

    def wait(self) -> None:
        self.latest.wait_until_finished()
        self.best.wait_until_finished()

    def close(self) -> None:
        self.latest.close()
        self.best.close()
