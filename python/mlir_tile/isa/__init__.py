"""The ISA's facts: chips, instruction atoms, TMA boxes, wgmma descriptors, fp8 and 16-bit values."""
