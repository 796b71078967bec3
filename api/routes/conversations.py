"""`/v1/conversations`: round tables, their transcripts, and the message route that runs a debate."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from parley.api.deps import Db, Principal, Services, require_scope
from parley.api.errors import ApiError
from parley.api.openapi import RUN_ID_HEADER, errors, streamed
from parley.api.sse import sse_response
from parley.services import roundtable as service
from parley.services import steering
from parley.services.runs import public_run
from parley.services.steering import BudgetFields
from parley.store import conversations as store
from parley.store.conversations import ConversationCreate, MessageCreate

router = APIRouter(prefix="/v1/conversations", tags=["conversations"], responses=errors(403))


class MessageBody(MessageCreate, BudgetFields):
    """The question, and how the debate may be steered (docs/steering.md)."""

    await_: Literal["after_round"] | None = Field(
        None, alias="await", description="Wait for you after every round (status `waiting`) until "
        "`POST /v1/runs/{id}/input` says `continue`, `guide` or `end`; the JSON answer is `202` with the run as "
        "soon as it waits.")

Reader = Annotated[Principal, Depends(require_scope("conversations"))]
Writer = Annotated[Principal, Depends(require_scope("conversations", write=True))]


@router.post("", status_code=201, summary="Create a conversation (a round table with no question yet)")
async def create_conversation(body: ConversationCreate, principal: Writer, db: Db) -> dict:
    doc = await store.create_conversation(db, workspace=principal.workspace, user=principal.user, title=body.title)
    return {"conversation": store.public_conversation(doc)}


@router.get("", summary="List the workspace's conversations, newest first",
            responses=errors((400, "`limit` is out of range, or `cursor` is not one this route gave.")))
async def list_conversations(
    principal: Reader,
    db: Db,
    limit: Annotated[int | None, Query(ge=1, le=200, description="Page size; unpaginated when omitted.")] = None,
    cursor: Annotated[str | None, Query(description="`nextCursor` of the previous page.")] = None,
) -> dict:
    try:
        docs, next_cursor = await store.list_conversations(db, workspace=principal.workspace, limit=limit,
                                                           cursor=cursor)
    except ValueError as exc:
        raise ApiError(400, f"cursor: {exc}", code="invalid_request") from exc
    body: dict = {"conversations": [
        {**store.public_conversation(d), "_count": {"messages": d["messageCount"]}} for d in docs
    ]}
    if limit is not None:
        body["nextCursor"] = next_cursor
    return body


@router.get("/{conversation_id}", summary="Get a conversation with its messages and debate rounds",
            responses=errors(404))
async def get_conversation(conversation_id: str, principal: Reader, db: Db) -> dict:
    doc = await store.get_conversation(db, workspace=principal.workspace, conversation_id=conversation_id)
    if doc is None:
        raise ApiError(404, "Not found")
    messages = await store.list_messages(db, conversation_id=conversation_id)
    rounds = await store.list_rounds(db, conversation_id=conversation_id)
    return {"conversation": {
        **store.public_conversation(doc),
        "messages": [store.public_message(m) for m in messages],
        **store.public_rounds(rounds),
    }}


@router.delete("/{conversation_id}", status_code=204, summary="Delete a conversation, its messages and rounds",
               responses=errors(404))
async def delete_conversation(conversation_id: str, principal: Writer, db: Db) -> Response:
    if not await store.delete_conversation(db, workspace=principal.workspace, conversation_id=conversation_id):
        raise ApiError(404, "Conversation not found")
    return Response(status_code=204)


@router.post("/{conversation_id}/message", summary="Ask the table a question and run the whole debate", responses={
    **streamed("The debate's result as JSON; its events as Server-Sent Events with `stream=true` or "
               "`Accept: text/event-stream`.", json_too=True, headers=RUN_ID_HEADER),
    202: {"description": "The debate waits for you (`await`, or a pause): the body is its run; steer it with "
                "`POST /v1/runs/{id}/input`."},
    **errors(404, (400, "A field is invalid; the message names it (a budget's `maxSeconds` below the minimum too)."),
             (402, "The budget (or the workspace's default) is too small for round 0 and the synthesis "
                   "(`budget_too_small`, with `minimum`)."),
             (409, "The Idempotency-Key was used for another question, or its debate is still being set up."),
             (429, "More calls on this route than its rate allows."),
             (500, "The debate could not run: no agents in the workspace, an exhausted token allowance, or a "
                   "model failure (the round-table contract's; the message says which).")),
})
async def post_message(
    conversation_id: str,
    body: MessageBody,
    request: Request,
    principal: Writer,
    backend: Services,
    stream: Annotated[bool, Query(description="Stream the debate as Server-Sent Events.")] = False,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
):
    steer = steering.parse_options(body.model_dump(by_alias=True, exclude_none=True), boundary="after_round")
    asked = await service.submit_message(
        backend, principal, conversation_id, body.content, idempotency_key=idempotency_key, steer=steer
    )
    headers = {"X-Run-Id": asked.run_id} if asked.run_id else {}
    if stream or "text/event-stream" in request.headers.get("accept", ""):
        if asked.replay is not None:
            return sse_response(_each(service.replayed(asked.replay)))
        return sse_response(backend.runs.follow(asked.run_id), headers=headers)
    try:
        return JSONResponse(await service.result_of(backend.runs, asked), headers=headers)
    except steering.RunWaiting as waiting:  # its end could be days away: the run, to steer
        return JSONResponse(public_run(waiting.record), status_code=202, headers=headers)


async def _each(events):
    for event in events:
        yield event
