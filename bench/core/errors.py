"""Errors the command line turns into one line and an exit code, never a traceback."""

EXIT_OK = 0
EXIT_RUN_FAILED = 1  # a run ended with status failed, timeout or crashed
EXIT_BAD_INPUT = 2  # nothing was run: the request cannot be carried out as given
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM: the shell's convention (128 + SIGINT)


class BenchError(Exception):
    """A problem the user can fix; the message says how."""

    exit_code = EXIT_BAD_INPUT


class UsageError(BenchError):
    """Bad input: unknown name, impossible size, missing files."""


class CoresInUse(BenchError):
    """Another bench run holds the cores a run needs, past the time it may wait (bench.harness.cores); nothing of the
    run was started."""


class StoreError(BenchError):
    """The results store cannot be read or written; `reason`, why in a few words (the message, where not given)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


class StoreFull(StoreError):
    """The store's file system has no room for what SQLite must write (a record, its -shm file)."""


class RecordNotStored(BenchError):
    """A run ended, but its record could not be written to the store (the message says where it is kept)."""

    exit_code = EXIT_RUN_FAILED


class Interrupted(BaseException):
    """Raised in the parent on SIGTERM so teardown runs as for Ctrl-C."""
