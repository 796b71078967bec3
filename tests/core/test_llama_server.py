"""The embedded model's server (`core.llama_server`): its chat format, where the prompt llama.cpp is given holds each
message as it was written, where llama-cpp-python's `chatml-function-calling` HTML-escaped it (`you&#39;re`), in a
plain answer and in a conversation that carries a tool call; and its prompt cache, whose size is what it holds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_cpp.llama import LlamaState
from llama_cpp.llama_cache import LlamaRAMCache
from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry
from llama_cpp.server.model import LlamaProxy
from llama_cpp.server.settings import ModelSettings

from parley.core.embedded import smollm2_path
from parley.core.llama_cache import PromptCache
from parley.core.llama_server import CHAT_FORMAT, install_prompt_cache, register

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


# The prompt cache (`core.llama_cache.PromptCache`): its size is the bytes its states hold.

def state(tokens: list[int], n_ctx: int = 64, vocab: int = 100, logits_all: bool = True) -> LlamaState:
    """A saved state as `Llama.save_state` makes one: its logits a row a token (`logits_all`), llama.cpp's data."""
    return LlamaState(input_ids=np.zeros(n_ctx, dtype=np.intc), scores=np.ones((len(tokens), vocab), dtype=np.single),
                      n_tokens=len(tokens), llama_state=bytes(1000 * len(tokens)), llama_state_size=1000 * len(tokens),
                      seed=0)


def real_bytes(state: LlamaState) -> int:
    return len(state.llama_state) + state.scores.nbytes + state.input_ids.nbytes


def test_the_cache_counts_the_logits_a_state_holds_and_stays_within_its_capacity():
    """llama-cpp-python's `LlamaRAMCache` counted `llama_state_size` alone: in 40 KB it kept three states of 13 KB of
    llama.cpp data, 5.2 KB of logits and 256 bytes of tokens each, 55 KB."""
    prompts = [[n, *range(100, 112)] for n in range(4)]
    theirs = LlamaRAMCache(capacity_bytes=40_000)
    ours = PromptCache(capacity_bytes=40_000, keep_logits=True)
    for prompt in prompts:
        theirs[prompt] = state(prompt)
        ours[prompt] = state(prompt)
    assert theirs.cache_size == 39_000 and sum(map(real_bytes, theirs.cache_state.values())) == 55_368  # the bug
    held = 13_000 + 5_200 + 256 + 13 * 4  # llama.cpp's data, the logits, the tokens, the key
    assert len(ours) == 2 and ours.cache_size == 2 * held <= ours.capacity_bytes
    assert ours[prompts[-1] + [7]].n_tokens == 13 and ours[prompts[-1] + [7]].scores.shape == (13, 100)
    assert prompts[2] in ours and prompts[1][:1] not in ours  # the most recent two kept, the oldest gone


def test_without_logits_a_state_is_kept_without_them_and_loads_into_a_model():
    cache = PromptCache(capacity_bytes=1_000_000)
    prompts = [[1, 2, 3, n] for n in range(4)] + [[9, 9]]
    for prompt in prompts:
        cache[prompt] = state(prompt)
    assert len(cache) == 5 and cache.cache_size == sum(len(p) * (1000 + 4) + 64 * 4 + 1 * 4 for p in prompts)
    found = cache[[1, 2, 3, 2, 8]]  # the longest shared prefix: [1, 2, 3, 2]
    assert found.n_tokens == 4 and found.scores.size == 1
    scores = np.full((8, 100), 5.0, dtype=np.single)  # what `Llama.load_state` does with a state's logits
    scores[: found.n_tokens, :] = found.scores.copy()
    assert not scores[:4].any() and (scores[4:] == 5.0).all()
    with pytest.raises(KeyError):
        cache[[4, 1]]


def test_the_server_runs_its_ram_prompt_cache_as_a_prompt_cache():
    name = "load_llama_from_model_settings"
    saved = LlamaProxy.__dict__[name]
    try:
        install_prompt_cache()
        install_prompt_cache()  # once only
        settings = ModelSettings(model=str(smollm2_path()), n_ctx=256, cache=True, cache_type="ram",
                                 cache_size=12345, logits_all=False, verbose=False)
        llama = LlamaProxy.load_llama_from_model_settings(settings)
        assert isinstance(llama.cache, PromptCache) and llama.cache.capacity_bytes == 12345
        assert not llama.cache.keep_logits
        llama.close()
    finally:
        setattr(LlamaProxy, name, saved)
