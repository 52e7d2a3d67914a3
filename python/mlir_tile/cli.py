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
