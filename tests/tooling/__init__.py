"""Tests of the tooling: the Redis harness, the simulator and the benchmarks' smoke runs."""
