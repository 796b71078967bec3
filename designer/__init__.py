"""The agent designer: JSON workflows that compose Parley's nodes and modes into LangGraph graphs.

    from parley.designer import compile_workflow, load_example
    graph = compile_workflow(load_example("debate-summary"))
"""

from parley.designer.compile import build_workflow, compile_workflow
from parley.designer.context import WorkflowContext
from parley.designer.run import (
    WorkflowInputError,
    WorkflowRunError,
    parse_assignments,
    prepare_input,
    stream_workflow,
)
from parley.designer.spec import SPEC_VERSION, WorkflowSpec, example_files, load_example, workflow_json_schema
from parley.designer.validate import Issue, WorkflowError, validate_workflow

__all__ = [
    "SPEC_VERSION",
    "Issue",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowInputError",
    "WorkflowRunError",
    "WorkflowSpec",
    "build_workflow",
    "compile_workflow",
    "example_files",
    "load_example",
    "parse_assignments",
    "prepare_input",
    "stream_workflow",
    "validate_workflow",
    "workflow_json_schema",
]
