"""The embedded model's chat format (`core.llama_server`): the prompt llama.cpp is given holds each message as it was
written, where llama-cpp-python's `chatml-function-calling` HTML-escaped it (`you&#39;re`), in a plain answer and in
a conversation that carries a tool call."""

from __future__ import annotations

import json

import pytest
from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

from parley.core.llama_server import CHAT_FORMAT, register

TEXT = """you're "ok" <b> & fine"""


class Recorder:
    """Stands in for `llama_cpp.Llama`: records each prompt it is asked to complete, and answers `answer`."""

    verbose = False

    def __init__(self, answer: str = "Fine.") -> None:
        self.answer = answer
        self.prompts: list[str] = []

    def create_completion(self, *, prompt: str, **_: object) -> dict:
        self.prompts.append(prompt)
        return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "smollm2",
                "choices": [{"text": self.answer, "index": 0, "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def handler(name: str):
    register()
    return LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather of a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}


@pytest.mark.parametrize("name, escaped", [(CHAT_FORMAT, False), ("chatml-function-calling", True)])
def test_a_message_reaches_the_model_as_written(name, escaped):
    """The contrast row is llama-cpp-python's own format, the one the embedded server used to run."""
    llama = Recorder()
    answer = handler(name)(llama=llama, messages=[{"role": "system", "content": "Don't <panic>."},
                                                  {"role": "user", "content": TEXT}])
    (prompt,) = llama.prompts
    assert (TEXT in prompt and "Don't <panic>." in prompt) is not escaped
    assert any(entity in prompt for entity in ("&#39;", "&#34;", "&lt;", "&amp;")) is escaped
    assert prompt.endswith("<|im_start|>assistant\n")
    assert answer["choices"][0]["message"]["content"] == "Fine."


def test_a_tool_call_and_the_messages_around_it_reach_the_model_as_written():
    arguments = json.dumps({"city": "L'Haÿ <sud>"}, ensure_ascii=False)
    messages = [{"role": "user", "content": TEXT},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
                {"role": "user", "content": "And tomorrow's?"}]
    llama = Recorder(answer='{"city": "Paris"}')
    answer = handler(CHAT_FORMAT)(llama=llama, messages=messages, tools=[WEATHER],
                                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (prompt,) = llama.prompts
    assert TEXT in prompt and f"functions.get_weather:\n{arguments}" in prompt and "And tomorrow's?" in prompt
    assert not any(entity in prompt for entity in ("&#39;", "&#34;", "&lt;", "&amp;"))
    (call,) = answer["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert messages[0]["content"] == TEXT and type(messages[0]["content"]) is str  # the caller's messages untouched
