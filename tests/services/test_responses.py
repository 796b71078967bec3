"""`services.responses.ResponseStream`: a response's run events as the Responses API's stream, checked against the
openai SDK's own event types."""

from __future__ import annotations

from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from parley.runs.events import Event, storage_failure
from parley.services.responses import ResponseStream, Started

EVENTS = TypeAdapter(ResponseStreamEvent)
COMPLETION = {"id": "resp_abc", "model": "openai:gpt-4o", "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                                     "total_tokens": 5},
              "_meta": {"routerMode": "direct"},
              "choices": [{"message": {"role": "assistant", "content": "Take one.", "tool_calls": [
                  {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}}]}


def stream() -> ResponseStream:
    record = {"_id": "run_1", "input": {"plan": {"mode": "single", "models": ["openai:gpt-4o"]}}}
    echo = {"model": "openai:gpt-4o", "instructions": None, "tools": [], "tool_choice": "auto",
            "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "temperature": None, "top_p": None,
            "max_output_tokens": None, "previous_response_id": None, "metadata": {}, "store": True, "user": None,
            "truncation": "disabled", "background": False, "reasoning": None}
    return ResponseStream(Started("resp_abc", 1, record, echo))


def kinds(events: list) -> list[str]:
    for event in events:
        if isinstance(event, dict) and event["type"] == "response.failed":
            # `error.code` is Parley's own code (`too_few_panelists`), where OpenAI's types list OpenAI's; the SDK
            # parses without checking it (its `error.code` is Parley's), and the rest is as its types say.
            event = {**event, "response": {**event["response"], "error": {**event["response"]["error"],
                                                                           "code": "server_error"}}}
        if not isinstance(event, str):
            EVENTS.validate_python(event)  # the SDK's own types take every event
    return [e if isinstance(e, str) else e["type"] for e in events]


def test_an_answer_that_came_whole_is_streamed_as_its_items_before_the_completion():
    s = stream()
    events = s.opening() + s.translate(Event("done", {"completion": COMPLETION}, seq=3))
    assert kinds(events) == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.done"] == [0, 1]
    assert [i["id"] for i in events[-1]["response"]["output"]] == ["msg_abc", "fc_abc_0"]


def test_streamed_text_then_a_call_close_each_item_in_turn():
    s = stream()
    events = s.opening()
    events += s.translate(Event("chunk", {"content": "Take "}, seq=1))
    events += s.translate(Event("chunk", {"content": "one."}, seq=2))
    events += s.translate(Event("tool_call", {"index": 0, "id": "call_1", "name": "get_weather", "arguments": ""},
                                seq=3))
    events += s.translate(Event("tool_call", {"index": 0, "arguments": "{}"}, seq=4))
    events += s.translate(Event("done", {"completion": COMPLETION}, seq=5))
    assert kinds(events)[2:] == [
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert events[6]["text"] == "Take one."


def test_a_run_that_fails_is_a_failed_response_and_a_lost_stream_an_error_event():
    s = stream()
    failed = s.translate(Event("error", {"error": {"message": "Too few panelists", "status": 502,
                                                   "code": "too_few_panelists"}}, seq=4))
    assert kinds(failed) == ["response.failed"]
    assert failed[0]["response"]["status"] == "failed"
    assert failed[0]["response"]["error"] == {"code": "too_few_panelists", "message": "Too few panelists"}
    lost = stream().translate(storage_failure())
    assert kinds(lost) == ["error"] and lost[0]["code"] == "storage_unavailable"
    progress = stream().translate(Event("panelist", {"model": "openai:gpt-5", "success": True, "latencyMs": 5,
                                                     "tokens": 3}, seq=1))
    assert progress == ["panelist openai:gpt-5 answered in 5 ms (3 tokens)"]
