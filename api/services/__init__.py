"""Orchestration of runs: graph execution, persistence and event fan-out, one module per mode."""
