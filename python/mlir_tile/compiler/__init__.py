"""The compiler's drivers: pass pipelines, PTX from a module, diagnostics, command-line helpers."""
