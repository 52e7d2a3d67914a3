"""Programmatic dependent launch (sm_90): a kernel launched as the dependent of the kernel before it on its
stream (the runtime's `prepare(..., dependent=True)`, CUDA's programmatic stream serialization) may start while
that one still runs; it waits for it, and sees its writes, at `wait_for_prerequisites`. A kernel lets the
dependent after it start once each of its CTAs has called `launch_dependents` (or exited), so the dependent's
launch and whatever it does before its wait run under this one's last work."""
from __future__ import annotations

from mlir.dialects import nvvm


class GridDependencies:
    def wait_for_prerequisites(self) -> None:
        """`griddepcontrol.wait`: the kernel this one was launched as the dependent of has completed and its
        memory operations are visible to this thread (a no-op in a kernel launched otherwise). A dependent kernel
        calls it before it reads what the kernel before it wrote, or writes what that one reads."""
        self._require("wait_for_prerequisites", "nvvm.griddepcontrol")
        nvvm.griddepcontrol(nvvm.GridDepActionKind.wait)

    def launch_dependents(self) -> None:
        """`griddepcontrol.launch_dependents`: this CTA lets the kernel launched after this one as its dependent
        start (once every CTA of this grid has called it or exited); what that kernel reads of this one's
        results it reads after its `wait_for_prerequisites`, which waits for this grid to complete."""
        self._require("launch_dependents", "nvvm.griddepcontrol")
        nvvm.griddepcontrol(nvvm.GridDepActionKind.launch_dependents)
