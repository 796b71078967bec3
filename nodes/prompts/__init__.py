"""Prompt templates: module-level constants with named `{placeholders}`, one module per mode."""
