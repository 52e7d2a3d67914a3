"""Models of the hardware: the reference ISA model, shared-memory banks, coverage, address plans, widening."""
