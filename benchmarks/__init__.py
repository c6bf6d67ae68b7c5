"""Benchmarks: programs that measure and report, not tests (``python -m benchmarks.<name>``)."""
