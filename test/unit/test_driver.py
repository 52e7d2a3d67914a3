"""The tools' text pre-checks (driver.py) read a string literal of any length in memory linear in the input
with a small constant: a 5 MB literal once took 736 MB (a backtracking frame per character), a 20 MB one
2.6 GB in tile-opt."""
import tracemalloc

import pytest

from mlir_tile.tools import driver

LITERAL = 'gpu.module @m [#nvvm.target<chip = "sm_90">] {\n  "' + "x" * 5_000_000 + '"\n}\n'


@pytest.mark.parametrize("check", [driver.nesting_problem, driver.target_text_problem, driver.mma_shape_text_problem,
                                   driver.unterminated_string_problem])
def test_a_long_string_literal_is_read_in_memory_linear_in_the_input(check):
    tracemalloc.start()
    try:
        assert check(LITERAL) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * len(LITERAL), f"{check.__name__} peaked at {peak} bytes for a {len(LITERAL)}-byte input"


def test_brackets_inside_a_string_with_escapes_are_not_counted():
    text = '"' + '\\"(' * 2000 + '"' + "(" * 10 + ")" * 10
    assert driver.nesting_problem(text) is None
    assert "nest more than" in driver.nesting_problem("(" * (driver.MAX_NESTING + 1))


@pytest.mark.parametrize("text, found", [
    ('x = "a"\n y = "b // c" // a "comment\n', None),
    ('x = "a\\"b"\n', None),
    ('x = "a\n"', ("expected '\"' in string literal", 1, 5)),
    ('ok\n  "unclosed', ("expected '\"' in string literal", 2, 3)),
])
def test_an_unterminated_string_literal_is_found_in_the_text(text, found):
    assert driver.unterminated_string_problem(text) == found
