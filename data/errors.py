"""The project's error types: what the command line turns into one line instead of a traceback.

Each subclasses the builtins a caller would otherwise catch (ValueError, FileNotFoundError), so
code written against the builtins keeps working.
"""


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
