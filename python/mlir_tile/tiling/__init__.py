"""Tilings: a CTA's operand transfers, synthesized conflict-free tiles, fragments, the byte transpose."""
