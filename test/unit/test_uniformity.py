"""analysis/uniformity.py's extension: a builder keeps one analysis of its kernel and extends it to the ops added
since each transfer's check (`Uniformity.extend`); at every extension, on random builder programs (the
fuzzer's builder channel: loops, branches, carried values, transfers) and on the library's kernels, it equals
a fresh analysis of the kernel as it is then, value by value and branch by branch."""
from builder_programs import run_program
from mlir_tile.analysis import uniformity
from mlir_tile.analysis.uniformity import Uniformity
from mlir_tile.kernels.flash import checks as flash_checks, sm80 as flash_sm80
from mlir_tile.kernels.gemm import sm80 as gemm_sm80, sm80_tiles as gemm_tiles


def test_an_extended_analysis_is_the_fresh_analysis_at_every_extension(monkeypatch):
    extend, compared, differing = Uniformity.extend, [], []

    def extend_and_compare(self):
        extend(self)
        if getattr(self, "fresh", False):
            return
        fresh = Uniformity.__new__(Uniformity)
        fresh.fresh = True
        Uniformity.__init__(fresh, self._function)
        branches = [{key: level for key, (level, _) in u._branch.items()} for u in (self, fresh)]
        compared.append(sum(level == uniformity.LANES for level in self.level.values()))
        if self.level != fresh.level or branches[0] != branches[1]:  # (the builder catches what a check raises)
            differing.append(str(self._function)[:2000])

    monkeypatch.setattr(uniformity.Uniformity, "extend", extend_and_compare)
    for seed in range(40):
        run_program(seed, steps=60)
    # the persistent GEMM on a 64 x 64 tile (its 128 x 256 one has twice the extensions, each on four times the ops:
    # 15 s), transfers in nested loops; attention's branches on warp indices
    gemm_sm80.build_module("bf16", gemm_tiles.variant(dict(bm=64, bn=64, bk=32, stages=4, persistent=True), 16,
                                                      b_major="nk"))
    flash_sm80.build_module(flash_checks.configure("bf16", 128, True, tuned=True))
    assert not differing, differing[0]
    assert len(compared) >= 50 and any(compared)  # many extensions, with thread-dependent values
