"""Remarks and warnings from the tile passes. The Python bindings can emit only errors at a location, so a
pass reports what is not an error here, and the pipeline runner hands it to the drivers as diagnostics at the
op's location (tile-opt prints them, and --verify-diagnostics checks them against expected-remark /
expected-warning like mlir-opt)."""
from __future__ import annotations

from mlir import ir

_reported: list[tuple[str, ir.Location, str]] = []


def report(op: ir.Operation, severity: str, message: str) -> None:
    """A remark or warning at `op`."""
    _reported.append((severity, op.operation.location, message))


def take() -> list[tuple[str, ir.Location, str]]:
    """Everything reported since the last call, oldest first."""
    found = list(_reported)
    _reported.clear()
    return found
