"""Field types that several wire schemas share, each held to its bound in `core.limits`: one definition, so that the
chat completions, the Responses API, routers, workflows, MCP tools and the CLI refuse the same things alike."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from parley.core.limits import MAX_MODEL_ID_CHARS

# A model id as a request or a stored router names it (`provider:model`, `router/<id>`, `self-moa/<provider:model>`):
# ids run to about 60 characters; a longer one is refused (400, naming the field) before anything is stored or echoed.
ModelId = Annotated[str, Field(min_length=1, max_length=MAX_MODEL_ID_CHARS)]


def model_id_problem(value: str | None) -> str | None:
    """Why `value` cannot be a model id (None when it can, or when it is None): for the checks that are not pydantic
    fields (the CLI's options, a duel's settings)."""
    if value is None:
        return None
    if not value.strip():
        return "a model id is not blank"
    if len(value) > MAX_MODEL_ID_CHARS:
        return f"a model id has at most {MAX_MODEL_ID_CHARS} characters, not {len(value):,}"
    return None
