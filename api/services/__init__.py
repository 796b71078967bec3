"""Orchestration of runs, one module per mode: graph execution, persistence, billing and event fan-out."""
