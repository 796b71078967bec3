"""Orchestration of runs (graph execution, persistence, event fan-out), one module per mode."""
