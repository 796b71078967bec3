"""Parley's OpenAPI document: every answer an operation can give, with its body, and the links between operations.

Routes declare which error statuses they can answer (`responses=errors(404, (409, "when ..."))`) and, where the
route reads its body itself, the body it accepts (`openapi_extra=request_body(Model)`). `install_openapi` does the
rest once, for every operation: each error answer gets the body model of its API family (chosen by path, as
`api.errors` renders it), FastAPI's automatic 422 becomes the validation status the route really answers (400,
or 422 under `/v1/workflows`), every authenticated operation documents 401 and 503, and the links that chain
create → read → run → delete are added.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from parley.api.errors import OPENAI_STYLE_PREFIXES, SEED_STYLE_PREFIXES, UNPROCESSABLE_PREFIXES
from parley.designer import workflow_json_schema

REF = "#/components/schemas/{model}"
# Wrapped in allOf: pydantic resolves a bare `$ref` beside a description against its own definitions.
WORKFLOW_REF = {"allOf": [{"$ref": REF.format(model="Workflow")}]}


# --- error bodies, one model per API family -------------------------------------------------------------


class ValidationIssue(BaseModel):
    """One field a request got wrong."""

    loc: list[str | int] = Field(description="Where: `body`, `query` or `path`, then the field's path.")
    msg: str = Field(description="What is wrong with it.")
    type: str = Field(description="Pydantic's error type, e.g. `missing`, `string_too_long`.")


class WorkflowIssue(BaseModel):
    """One problem of a workflow document or of a run's input."""

    model_config = ConfigDict(extra="allow")

    # Usually a node's id; for a malformed document, the value found where a node's id was expected.
    node: Any = Field(None, description="The node it concerns, when it concerns one.")
    path: str | None = Field(None, description="JSON path of the faulty value in the document.")
    message: str
    detail: Any = None


class DuelError(BaseModel):
    """The duel contract's error body (`/api/...`): `{"error": "<message>"}`, with `retryAfter` on a 429. The refusals
    the original API spells out have exactly that body; Parley's others add a `code`."""

    model_config = ConfigDict(extra="forbid")

    error: str = Field(description="What went wrong, for a person to read.")
    code: str | None = Field(None, description="A stable machine code, absent on the original API's own refusals.")
    retryAfter: int | None = Field(None, description="Seconds to wait before trying again (429 only).")
    details: list[ValidationIssue] | None = Field(None, description="Each bad field (a malformed query only).")
    field: str | None = Field(None, description="The budget field at fault (`invalid_budget`).")
    minimum: dict[str, float] | None = Field(None, description="The least budget one round and the verdict need "
                                             "(`budget_too_small`): `maxTokens`, `maxCost` or `maxSeconds`.")
    short: list[str] | None = Field(None, description="The budget fields below that minimum (`budget_too_small`).")


class ParleyError(BaseModel):
    """The error body of Parley's own routes (`/v1/agents`, `/v1/conversations`, `/v1/workflows`, `/v1/runs` …)."""

    model_config = ConfigDict(extra="allow")

    error: str = Field(description="What went wrong, for a person to read.")
    code: str | None = Field(None, description="A stable machine code, e.g. `scope_denied`, `run_not_found`; absent "
                             "only on the round-table contract's own refusals.")
    details: list[ValidationIssue] | None = Field(None, description="Each bad field of an invalid request.")
    errors: list[WorkflowIssue] | None = Field(None, description="Each problem of a workflow or of its input.")


class OpenAIErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    message: str = Field(description="What went wrong, for a person to read.")
    type: str = Field(description="OpenAI's error type, e.g. `invalid_request_error`, `rate_limit_error`.")
    code: str | None = Field(description="A stable machine code, e.g. `router_not_found`; null when none.")


class OpenAIError(BaseModel):
    """OpenAI's error body, on the OpenAI-compatible routes (`/v1/chat/…`, `/v1/routers`)."""

    model_config = ConfigDict(extra="forbid")

    error: OpenAIErrorDetail


def error_model(path: str) -> type[BaseModel]:
    """The error body model of the API family `path` belongs to (the shape `api.errors.error_body` renders)."""
    if path.startswith(OPENAI_STYLE_PREFIXES):
        return OpenAIError
    return DuelError if path.startswith(SEED_STYLE_PREFIXES) else ParleyError


# --- what routes declare -----------------------------------------------------------------------------

# When each error status is answered, unless a route says more precisely.
WHEN = {
    400: "The request is invalid; the message names the field at fault.",
    401: "No API key, or an unknown one.",
    402: "The workspace cannot pay for this: its credit or token allowance is used up.",
    403: "The key may not do this: it is read-only, or lacks the scope the route needs.",
    404: "Nothing with this id in the caller's workspace.",
    409: "The request conflicts with the resource's current state.",
    413: "The request body is larger than the server's limit (`PARLEY_MAX_BODY_BYTES`, 4 MB by default).",
    422: "The request is well-formed but cannot be processed; `errors` lists each problem.",
    429: "Too many requests; retry after `Retry-After` seconds.",
    500: "The work could not be done; the message says why.",
    502: "The model endpoint failed to answer.",
    503: "The database is unreachable.",
}
# What every body is refused for where it enters (`api/entry.py`), whatever the operation.
BODY_REFUSALS = ("A body that is not JSON (`invalid_json`), nests deeper than 64 levels (`too_deep`), or holds what "
                 "MongoDB cannot store: a NUL character in a key, a lone UTF-16 surrogate, an integer beyond 64 bits "
                 "(`unstorable_value`).")
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before trying again.", "schema": {"type": "integer"}}}


def errors(*answers: int | tuple[int, str]) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route for the error statuses it can answer: each a status (with the usual
    description) or `(status, when)`. Their bodies are filled in by path, by `install_openapi`."""
    out: dict[int | str, dict[str, Any]] = {}
    for answer in answers:
        status, when = answer if isinstance(answer, tuple) else (answer, WHEN[answer])
        out[status] = {"description": when, **({"headers": RETRY_AFTER} if status == 429 else {})}
    return out


# What each event's `data:` holds (schemathesis checks every event of a stream against it).
SSE_DATA = {"type": "object", "description": "One event's `data:`: a JSON object; `event:` names its kind."}

RUN_ID_HEADER = {"X-Run-Id": {"description": "The run's id: `GET /v1/runs/{run_id}` reads it.",
                              "schema": {"type": "string"}}}


def streamed(description: str, *, json_too: bool = False, headers: dict | None = None) -> dict[int, dict[str, Any]]:
    """A 200 that is a Server-Sent Events stream (or, with `json_too`, JSON unless streaming was asked for)."""
    content: dict[str, Any] = {"text/event-stream": {"schema": SSE_DATA}}
    if json_too:
        content = {"application/json": {"schema": {"type": "object"}}, **content}
    return {200: {"description": description, "content": content, **({"headers": headers} if headers else {})}}


_EXTRA_SCHEMAS: dict[str, dict[str, Any]] = {}


def request_body(model: type[BaseModel], *, description: str) -> dict[str, Any]:
    """The `openapi_extra=` of a route that reads and checks its JSON body itself, declaring it as `model`."""
    schema = model.model_json_schema(ref_template=REF)
    _EXTRA_SCHEMAS.update(schema.pop("$defs", {}))
    _EXTRA_SCHEMAS[model.__name__] = schema
    ref = {"$ref": REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "description": description,
                            "content": {"application/json": {"schema": ref}}}}


def _workflow_schemas() -> dict[str, dict[str, Any]]:
    """The designer's workflow JSON Schema as components: `Workflow` and its definitions."""
    schema = workflow_json_schema()
    defs = schema.pop("$defs", {})
    schema.pop("$schema", None)
    schemas = {"Workflow": schema, **defs}
    return _rebase_refs(schemas)


def _rebase_refs(value: Any) -> Any:
    """Point the references of a standalone JSON Schema (`#/$defs/X`) at the spec's components: each `$ref`, and
    the values of a discriminator's `mapping` (references too)."""
    if isinstance(value, str) and value.startswith("#/$defs/"):
        return value.replace("#/$defs/", "#/components/schemas/", 1)
    if isinstance(value, dict):
        return {k: _rebase_refs(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebase_refs(v) for v in value]
    return value


# --- links -------------------------------------------------------------------------------------------

ID_OF_NEW_AGENT = {"agent_id": "$response.body#/agent/id"}
RUN_ID = {"run_id": "$response.header.X-Run-Id"}
RUN_OPS = ["GET /v1/runs/{run_id}", "GET /v1/runs/{run_id}/events", "POST /v1/runs/{run_id}/cancel"]

# (operation, status) → (parameters the next operations take from the answer, those operations).
LINKS: list[tuple[str, str, dict[str, str], list[str]]] = [
    ("POST /v1/agents", "201", ID_OF_NEW_AGENT, [
        "GET /v1/agents/{agent_id}", "PATCH /v1/agents/{agent_id}", "DELETE /v1/agents/{agent_id}",
        "POST /v1/agents/{agent_id}/documents", "GET /v1/agents/{agent_id}/documents",
        "GET /v1/agents/{agent_id}/memories", "DELETE /v1/agents/{agent_id}/memories"]),
    ("POST /v1/agents/{agent_id}/documents", "201",
     {"agent_id": "$request.path.agent_id", "document_id": "$response.body#/document/id"},
     ["GET /v1/agents/{agent_id}/documents/{document_id}", "DELETE /v1/agents/{agent_id}/documents/{document_id}"]),
    ("POST /v1/conversations", "201", {"conversation_id": "$response.body#/conversation/id"}, [
        "GET /v1/conversations/{conversation_id}", "DELETE /v1/conversations/{conversation_id}",
        "POST /v1/conversations/{conversation_id}/message"]),
    ("POST /v1/conversations/{conversation_id}/message", "200", RUN_ID, RUN_OPS),
    ("POST /v1/routers", "201", {"router_id": "$response.body#/id"}, [
        "GET /v1/routers/{router_id}", "PATCH /v1/routers/{router_id}", "DELETE /v1/routers/{router_id}"]),
    ("POST /v1/workflows", "201", {"workflow_id": "$response.body#/id"}, [
        "GET /v1/workflows/{workflow_id}", "DELETE /v1/workflows/{workflow_id}", "POST /v1/workflows/{workflow_id}/runs",
        "POST /v1/workflows/{workflow_id}/runs/stream", "GET /v1/workflows/{workflow_id}/runs"]),
    ("POST /v1/workflows/{workflow_id}/runs", "200", RUN_ID, ["GET /v1/workflows/runs/{run_id}", *RUN_OPS]),
    ("POST /v1/workflows/runs", "200", RUN_ID, ["GET /v1/workflows/runs/{run_id}", *RUN_OPS]),
    ("POST /v1/chat/completions", "200", RUN_ID, RUN_OPS),
    ("POST /api/debate", "200", {"debate_id": "$response.header.X-Debate-Id"}, [
        "GET /api/debate/{debate_id}", "GET /api/debate/{debate_id}/events"]),
    ("POST /api/debate", "200", RUN_ID, RUN_OPS),
]


def _add_links(paths: dict[str, Any]) -> None:
    def operation(key: str) -> dict[str, Any]:
        method, path = key.split(" ", 1)
        return paths[path][method.lower()]

    for source, status, parameters, targets in LINKS:
        response = operation(source)["responses"][status]
        for target in targets:
            op = operation(target)
            names = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            response.setdefault("links", {})[op["operationId"]] = {
                "operationId": op["operationId"],
                "parameters": {name: expr for name, expr in parameters.items() if name in names},
            }


# --- the document ------------------------------------------------------------------------------------


def _takes_input(operation: dict[str, Any]) -> bool:
    return bool(operation.get("parameters") or operation.get("requestBody"))


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document, every answer documented."""
    spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    models: set[type[BaseModel]] = set()
    for path, item in spec["paths"].items():
        for method, op in item.items():
            responses = op["responses"]
            automatic = responses.pop("422", None)
            if automatic is not None and "HTTPValidationError" not in str(automatic):
                responses["422"] = automatic  # the route's own 422, not FastAPI's
            invalid = "422" if path.startswith(UNPROCESSABLE_PREFIXES) else "400"
            if _takes_input(op) and invalid not in responses:
                responses[invalid] = {"description": WHEN[int(invalid)]}
            if "requestBody" in op:  # `api.entry.EntryGuard` holds every body to these
                responses.setdefault("413", {"description": WHEN[413]})
                responses[invalid]["description"] += " " + BODY_REFUSALS
            if op.get("security"):  # it takes a key (`api.deps.get_principal`)
                responses.setdefault("401", {"description": WHEN[401]})
                responses.setdefault("503", {"description": WHEN[503]})
            model = error_model(path)
            for status, response in responses.items():
                if status[0] in "45" and "content" not in response:
                    response["content"] = {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}}
                    models.add(model)
    for model in models:
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    schemas.update(_EXTRA_SCHEMAS)
    schemas.update(_workflow_schemas())
    spec["components"]["schemas"] = dict(sorted(schemas.items()))
    _add_links(spec["paths"])
    return spec


def install_openapi(app: FastAPI) -> None:
    """Serve `build_openapi(app)` at `/openapi.json` (built once, on first use)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def operations(spec: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, Any]]]:
    """Every (method, path, operation) of `spec`."""
    for path, item in spec["paths"].items():
        for method, op in item.items():
            yield method, path, op
