"""The OpenAPI document: committed as docs/openapi.json, and true to the API (schemathesis, every check)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx

import schemathesis
from schemathesis.engine import Status, events, from_schema

from parley.api.main import create_app
from parley.api.openapi import operations

SPEC_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"

# Requests that fit the declared schema but that the API refuses for reasons a JSON Schema cannot say: a workflow
# whose edges name unknown nodes, an input that does not fit the workflow's own state keys, a model id naming no
# provider, a router whose models are of too few families. Each such refusal is documented on its operation.
SEMANTIC_REFUSALS = {
    "POST /v1/workflows": ["422"],
    "POST /v1/workflows/runs": ["422"],
    "POST /v1/workflows/runs/stream": ["422"],
    "POST /v1/workflows/{workflow_id}/runs": ["422"],
    "POST /v1/workflows/{workflow_id}/runs/stream": ["422"],
    "POST /v1/agents": ["400"],
    "PATCH /v1/agents/{agent_id}": ["400"],
    "POST /v1/agents/{agent_id}/documents": ["413"],
    "POST /v1/routers": ["400"],
    "PATCH /v1/routers/{router_id}": ["400"],
    "POST /v1/chat/completions": ["400", "402", "502"],
    "POST /v1/responses": ["400", "402", "502"],
    # A budget below what one round and the verdict reserve (docs/steering.md): the minimum depends on the request.
    "POST /api/debate": ["413", "402"],
    "POST /v1/conversations/{conversation_id}/message": ["402"],
    # A cursor is valid only if an earlier page gave it.
    "GET /api/debates": ["400"],
    "GET /v1/runs": ["400"],
    "GET /v1/conversations": ["400"],
    "GET /v1/webhooks/deliveries": ["400"],
    # A receiver's URL must lie under the deployment's PARLEY_WEBHOOK_URLS (none in this test).
    "POST /v1/webhooks": ["400"],
    "PATCH /v1/webhooks/{webhook_id}": ["400"],
}
ACCEPTED = ["2xx", "401", "403", "404", "409", "429"]
# Pydantic reads these bodies in its lax mode, so a boolean field also takes 0 and 1: schemathesis' negative data
# (a number where the schema says boolean) is accepted. Tightening that would change what clients may send.
LAX_BOOLEANS = ["POST /v1/chat/completions", "POST /v1/responses", "POST /v1/routers", "PATCH /v1/routers/{router_id}"]
# Collections a DELETE empties rather than removes: listing one afterwards is a 200 with no items, which
# schemathesis' use-after-free check (made for single resources) takes for a deleted resource still served.
EMPTIED_BY_DELETE = ["GET /v1/agents/{agent_id}/memories"]


def test_committed_spec_is_current():
    """docs/openapi.json is what the app serves; `make openapi` rewrites it."""
    assert SPEC_FILE.exists(), "docs/openapi.json is missing: run `make openapi`"
    committed = json.loads(SPEC_FILE.read_text())
    assert committed == create_app().openapi(), "docs/openapi.json is out of date: run `make openapi`"


def test_every_error_answer_has_its_familys_body():
    spec = create_app().openapi()
    families = {"/api/": "DuelError", "/v1/chat/": "OpenAIError", "/v1/responses": "OpenAIError",
                "/v1/routers": "OpenAIError",
                "/v1/agents": "ParleyError", "/v1/runs": "ParleyError", "/v1/workflows": "ParleyError"}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            assert "HTTPValidationError" not in json.dumps(op), f"{method} {path} documents FastAPI's 422"
            family = next((name for prefix, name in families.items() if path.startswith(prefix)), None)
            for status, response in op["responses"].items():
                if status.startswith("4") and family:
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/" + family), f"{method} {path} {status}: {ref}"
    assert "400" in spec["paths"]["/v1/agents"]["post"]["responses"]
    assert "422" in spec["paths"]["/v1/workflows"]["post"]["responses"]
    assert "400" not in spec["paths"]["/v1/workflows"]["post"]["responses"]


@contextlib.contextmanager
def ending_every_wait(url: str, key: str, db) -> Iterator[None]:
    """A person who answers every wait with `end`. A run started with `await` (a duel's or a round table's body may ask
    for it, a stored workflow may have an await node) stops at each boundary until someone steers it, its stream
    open meanwhile (docs/steering.md): schemathesis, which reads a stream to its end, would wait out its request
    timeout, step after step."""
    stop = threading.Event()

    def answer() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as person:
            while not stop.wait(0.2):
                for run in db.runs.find({"status": "waiting"}, {"_id": 1}):
                    with contextlib.suppress(httpx.HTTPError):  # one that ended meanwhile answers 409
                        person.post(f"/v1/runs/{run['_id']}/input", json={"action": "end"})

    thread = threading.Thread(target=answer, name="ends every wait", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(15)


def test_schemathesis_finds_nothing(parley, http, make_key, sync_db):
    """Every phase (examples, coverage, fuzzing, stateful through the links) and every check, on a fixed seed and
    a small, fixed number of examples per operation, against the real app and the scripted model server."""
    key = make_key(("admin",))
    # Two agents, so that a round-table question (reached through the links) can run rather than fail as the round-table contract says.
    for name in ("Claire", "Marc"):
        assert http.post("/v1/agents", json={"name": name}, headers={"Authorization": f"Bearer {key}"}).status_code == 201
    config = schemathesis.Config.from_dict({
        "seed": 20251,
        "base-url": parley.url,
        "headers": {"Authorization": f"Bearer {key}"},
        "workers": 1,
        "request-timeout": 60,
        "max-stream-events": 200,
        "generation": {"max-examples": 25, "deterministic": True, "no-shrink": True, "database": "none"},
        "phases": {"stateful": {"max-steps": 12}},
        "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}},
        "operations": [{"include-name": op, "checks": checks} for op, checks in _operation_checks().items()],
    })
    schema = schemathesis.openapi.from_dict(create_app().openapi(), config=config)
    problems, tested = [], 0
    with ending_every_wait(parley.url, key, sync_db):
        found = list(from_schema(schema).execute())
    for event in found:
        if isinstance(event, events.ScenarioFinished):
            tested += len(event.recorder.cases)
            if event.status in (Status.FAILURE, Status.ERROR):
                problems.append(_describe(event.recorder))
        elif isinstance(event, (events.NonFatalError, events.FatalError)):
            problems.append(f"{getattr(event, 'label', 'engine')}: {event.info.message if hasattr(event, 'info') else event}")
    assert tested > 100, f"schemathesis ran only {tested} cases"
    assert not problems, "\n\n".join(problems)


def _operation_checks() -> dict[str, dict]:
    checks: dict[str, dict] = {}
    refusals = {op: list(extra) for op, extra in SEMANTIC_REFUSALS.items()}
    # A body the schema admits may still hold what MongoDB cannot store (a NUL in a key, a lone surrogate, an
    # integer past 64 bits): every body operation documents that refusal, which no JSON Schema can express.
    for method, path, op in operations(create_app().openapi()):
        if "requestBody" in op:
            refusals.setdefault(f"{method.upper()} {path}", []).append("422" if path.startswith("/v1/workflows") else "400")
    for op, extra in refusals.items():
        checks.setdefault(op, {})["positive_data_acceptance"] = {"expected-statuses": ACCEPTED + extra}
    for op in LAX_BOOLEANS:
        checks.setdefault(op, {})["negative_data_rejection"] = {"enabled": False}
    for op in EMPTIED_BY_DELETE:
        checks.setdefault(op, {})["use_after_free"] = {"enabled": False}
    return checks


def _describe(recorder) -> str:
    lines = [recorder.label]
    for case_id, checks in recorder.checks.items():
        for check in checks:
            if check.failure_info is not None:
                case = recorder.cases[case_id].value
                failure = check.failure_info.failure
                lines.append(f"  {check.name}: {failure.title} — {case.method} {case.formatted_path}"
                             f" body={str(case.body)[:300]} query={case.query}\n    {str(failure.message)[:600]}")
    return "\n".join(lines)


def test_every_reference_resolves():
    """Each `$ref`, and each discriminator mapping (references too), points at a schema of the document: generators
    such as openapi-typescript refuse a document where one does not."""
    spec = create_app().openapi()
    refs: list[str] = []

    def collect(value) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "$ref" and isinstance(item, str):
                    refs.append(item)
                elif key == "mapping" and isinstance(item, dict):
                    refs.extend(v for v in item.values() if isinstance(v, str))
                else:
                    collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    collect(spec)
    schemas = spec["components"]["schemas"]
    missing = sorted({r for r in refs if not r.startswith("#/components/schemas/")
                      or r.removeprefix("#/components/schemas/") not in schemas})
    assert refs and not missing, missing
