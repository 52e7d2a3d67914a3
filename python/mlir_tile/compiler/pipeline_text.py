"""Pass-pipeline text, the one place it is taken apart (pure Python): `builtin.module(a, b{x=1 y=2},
gpu.module(c))` into its top-level elements, and an element into its name and options."""
from __future__ import annotations

import re

_ELEMENT = re.compile(r"([\w.\-]+)(?:\{(.*)\})?", re.S)


def split_elements(text: str) -> list[str]:
    """Top-level elements of `a, b{x=1}, gpu.module(c, d)` (an outer `builtin.module(...)` is removed)."""
    text = text.strip()
    match = re.fullmatch(r"builtin\.module\((.*)\)", text, re.S)
    if match:
        text = match.group(1)
    elements, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' or '}}' in pass pipeline '{text}'")
        elif char == "," and depth == 0:
            elements.append(text[start:position].strip())
            start = position + 1
    if depth:
        raise ValueError(f"unbalanced '(' or '{{' in pass pipeline '{text}'")
    if text[start:].strip():
        elements.append(text[start:].strip())
    return elements


def parse_element(element: str) -> tuple[str, dict[str, str]]:
    """`name{a=1 b=2}` -> ("name", {"a": "1", "b": "2"}); anything else (a nested pipeline) -> (element, {})."""
    match = _ELEMENT.fullmatch(element.strip())
    if not match:
        return element, {}
    options = {}
    for item in (match.group(2) or "").split():
        key, _, value = item.partition("=")
        options[key] = value
    return match.group(1), options
