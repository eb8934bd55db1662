"""The project's error types, what the command line turns into one line instead of a traceback,
and the reading of the system's own (OSError).

Each subclasses the builtins a caller would otherwise catch (ValueError, FileNotFoundError), so
code written against the builtins keeps working.
"""

from collections.abc import Iterator


class GenretError(Exception):
    """Base of every error the project raises on purpose; its message is one line for a user."""


class ArgumentError(GenretError, ValueError):
    """A command-line argument or config value is invalid; the message names it."""


class InputError(GenretError, ValueError):
    """A user-supplied file is malformed; the message names the file and line."""


class ArtifactError(GenretError, FileNotFoundError, ValueError):
    """A work-directory artifact is missing, stale or damaged; the message names it and how to
    make it again."""


class BusyError(GenretError, OSError):
    """A run directory is in use by another process (`data.runlock`); the message names it."""


class StageError(GenretError):
    """A pipeline stage failed; the message names the stage and the cause."""


class WriteError(GenretError, OSError):
    """A write that the system refused (a full disk, a read-only folder); the message says what
    was being written and where."""


def os_reason(error: OSError) -> str:
    """What the system said, in the words of a sentence: "no space left on device"."""
    text = error.strerror or str(error)
    return text[:1].lower() + text[1:]


def causes(error: BaseException | None) -> Iterator[BaseException]:
    """`error`, then what it was raised from (its cause, else its context), and so on."""
    seen = set()
    while error is not None and id(error) not in seen:
        yield error
        seen.add(id(error))
        error = error.__cause__ or error.__context__


def os_error_in(error: BaseException) -> OSError | None:
    """The OSError from the system (it carries an errno) that `error` is or was raised from."""
    return next((e for e in causes(error) if isinstance(e, OSError) and e.errno is not None), None)
