"""Test helpers shared by Parley's test suite and benchmarks.

Import from the submodules (``from tests.support.scripted_llm import ScriptedLLM``);
this package re-exports nothing so that ``python -m tests.support.scripted_llm``
does not load the module twice.
"""
