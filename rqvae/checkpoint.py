"""All orbax calls of the tokenizer: a manager, save, and restore into an abstract train state."""

from pathlib import Path

import orbax.checkpoint as ocp


def manager(directory: Path, *, max_to_keep: int = 2) -> ocp.CheckpointManager:
    """A checkpoint manager over `directory` (created if missing)."""
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    return ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    )


def save(mngr: ocp.CheckpointManager, step: int, state, meta: dict) -> None:
    """Saves the train state and a JSON description of what it was trained on."""
    mngr.save(
        step,
        args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
    )


def latest_step(mngr: ocp.CheckpointManager) -> int | None:
    return mngr.latest_step()


def restore_meta(mngr: ocp.CheckpointManager, step: int) -> dict:
    """The JSON description saved with checkpoint `step`."""
    out = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
    return dict(out["meta"])


def restore_state(mngr: ocp.CheckpointManager, step: int, abstract_state):
    """The train state of checkpoint `step`, shaped like `abstract_state` (jax.eval_shape)."""
    out = mngr.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))
    )
    return out["state"]
