"""What the command lines of mlir-tile share (pure Python: the synthesis command imports no MLIR)."""
from __future__ import annotations

import functools
import os
import sys


def quiet_on_closed_pipe(main):
    """`main`, ending quietly (no traceback) when the reader of its output goes away (`tile-opt ... | head`)."""
    @functools.wraps(main)
    def run(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout at exit
            return 141  # 128 + SIGPIPE, as a shell reports it
    return run


class OutputError(Exception):
    """An output the user named cannot be written; the message says which and why."""


def write_output(path: str, data: bytes) -> None:
    """`data` to the file `path`, or to standard output for '-'; OutputError (not OSError) when that fails: a
    directory, a path without write permission, a full device, a closed standard output."""
    if path == "-":
        if sys.stdout is None:
            raise OutputError("cannot write standard output: it is closed")
        try:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as error:
            raise OutputError(f"cannot write standard output: {_reason(error)}") from None
        return
    try:
        with open(path, "wb") as stream:
            stream.write(data)
    except OSError as error:
        raise OutputError(f"cannot write '{path}': {_reason(error)}") from None


def _reason(error: Exception) -> str:
    return error.strerror if isinstance(error, OSError) and error.strerror else str(error)
