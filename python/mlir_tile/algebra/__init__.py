"""The layout algebra (CuTe's notation and operations)."""
