"""The provider table: how to reach each provider and which OpenAI-API dialect it speaks.

Provider quirks (token-limit parameter, structured-output method, context window, output and temperature caps,
sampling fields for prose and for JSON, which models take a reasoning effort and how, which need `cache_control`
breakpoints to cache a prompt) live in `BUILTIN_PROVIDERS` and nowhere else; a deployment amends it with
`PARLEY_HOME/providers.json` (`llm.factory.ModelFactory` reads that file).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from parley.core.limits import REASONING_EFFORTS

__all__ = ["REASONING_EFFORTS", "Provider", "BUILTIN_PROVIDERS", "DEFAULT_PROVIDER", "split_model_id"]

DEFAULT_PROVIDER = "openai"
# Models that reason and take an effort, by name (the `provider:` part left out, a gateway's vendor path kept): OpenAI's
# o-series, gpt-5 (not gpt-5-chat) and gpt-oss, and the reasoning models gateways pass an effort on to.
REASONING_MODELS = (r"(^|/)(o[1-9](-|$)|gpt-5(?!-chat)|gpt-oss|deepseek-r1|deepseek-reasoner|qwq|qwen3|"
                    r"claude-(3-7|3\.7|opus-4|sonnet-4|haiku-4|[a-z]+-4)|gemini-(2\.5|3)|grok-(3-mini|4))")
# Models that cache a prompt prefix only where the request marks it (`cache_control` breakpoints): Anthropic's, reached
# through an OpenAI-compatible gateway (OpenRouter, LiteLLM). OpenAI, DeepSeek and Gemini cache by themselves.
CACHE_CONTROL_MODELS = r"claude"


class Provider(BaseModel):
    """How to reach one provider and which OpenAI-API dialect it speaks."""

    base_url: str | None = Field(None, description="Endpoint; None means OPENAI_BASE_URL (or OpenAI's).")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the key.")
    token_param: Literal["max_completion_tokens", "max_tokens"] = Field(
        "max_completion_tokens",
        description="Which field carries the output cap: OpenAI's current one, or the legacy `max_tokens` that "
        "servers such as llama-cpp-python and older vLLM honour instead.",
    )
    structured_method: Literal["json_schema", "json_object_schema", "function_calling"] = Field(
        "json_schema",
        description="`json_schema` (OpenAI structured outputs), `json_object_schema` "
        "(`{type: json_object, schema}`, llama-cpp-python's grammar mode) or `function_calling`.",
    )
    stream_usage: bool = Field(True, description="Whether the server honours `stream_options.include_usage`.")
    context_window: int | None = Field(None, description="Tokens the model accepts; prompts are trimmed to fit.")
    max_output_tokens: int | None = Field(None, description="Hard cap on output tokens, whatever a node asks.")
    max_temperature: float | None = Field(None, description="Temperatures above this are lowered to it.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Extra request fields the server understands (sampling knobs)."
    )
    schema_in_prompt: bool = Field(
        False,
        description="Whether the fields of a JSON answer's schema are written into the prompt (`llm.formats.schema_note`): "
        "llama.cpp's grammar holds the sampling to the schema but, unlike OpenAI's structured outputs, never shows "
        "the model what the fields are for.",
    )
    json_string_cap: int | None = Field(
        None,
        description="Characters a string of a JSON answer may hold where its schema sets no bound, in the schema a "
        "grammar-constrained endpoint (`json_object_schema`) is sent: a small model that starts repeating itself "
        "fills an unbounded string up to its output cap, and the answer is cut off unreadable.",
    )
    tool_choice_required: bool = Field(
        True,
        description="Whether the server takes `tool_choice: \"required\"`. llama-cpp-python's function calling takes "
        "`auto`, `none` or one named function only: a required call is sent as that function when one tool is "
        "offered, else as `auto`.",
    )
    null_assistant_content: bool = Field(
        True,
        description="Whether an assistant message that calls tools may carry `content: null`, as OpenAI's API sends "
        "it (llama-cpp-python's server refuses the request): else it goes as empty text.",
    )
    repeats_tool_call_names: bool = Field(
        False,
        description="Whether the server repeats a tool call's name and id in every streamed piece and adds the "
        "deprecated `function_call` beside `tool_calls` (llama-cpp-python's function calling): Parley keeps the first "
        "piece's name and id, as OpenAI streams them, and drops `function_call`.",
    )
    max_concurrent: int | None = Field(
        None,
        ge=1,
        description="Calls the endpoint answers at once; Parley holds the others in line (first come, first sent) "
        "and starts their read timeout and deadline when they are sent (`llm.endpoints`). None: no limit. The "
        "embedded llama.cpp server answers one at a time and leaves the rest waiting, unanswered, on the timeout.",
    )
    json_extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Request fields that replace `extra_body`'s in calls that must answer JSON (Parley's structured "
        "steps, a request's `response_format`): a penalty on repeated tokens, meant for prose, punishes the quotes "
        "and brackets every JSON answer repeats, and a grammar-constrained model then writes them inside its strings.",
    )

    reasoning_models: str | None = Field(
        REASONING_MODELS,
        description="A regular expression over the model's name (without `provider:`): the models of this provider "
        "that take a reasoning effort. None: none does, and a reasoning effort asked of one is refused (400 "
        "`reasoning_unsupported`).",
    )
    reasoning_param: Literal["reasoning_effort", "reasoning"] = Field(
        "reasoning_effort",
        description="How the effort is sent: OpenAI's `reasoning_effort: \"high\"` (chat completions; LiteLLM maps "
        "it for other vendors), or `reasoning: {effort: \"high\"}` (OpenRouter's unified field).",
    )
    cache_control_models: str | None = Field(
        CACHE_CONTROL_MODELS,
        description="A regular expression over the model's name: the models that cache a prompt prefix only where "
        "the request marks it, with Anthropic's `cache_control: {type: ephemeral}` on a content part "
        "(`llm.breakpoints`). "
        "None: no model of this provider needs marks (OpenAI, DeepSeek and Gemini cache repeated prefixes by "
        "themselves).",
    )
    cache_min_tokens: int = Field(
        1024, ge=1,
        description="The shortest prefix (in tokens, estimated) worth a `cache_control` mark: Anthropic caches no "
        "shorter one (1,024 tokens for Sonnet and Opus; Haiku needs 2,048), and a mark on a shorter one is wasted.",
    )

    def reasons(self, model_name: str) -> bool:
        """Whether the model `model_name` (without `provider:`) takes a reasoning effort here."""
        return self.reasoning_models is not None and re.search(self.reasoning_models, model_name.lower()) is not None

    def reasoning_fields(self, effort: str) -> dict[str, Any]:
        """The request fields that ask for `effort`, in this provider's dialect."""
        if self.reasoning_param == "reasoning":
            return {"reasoning": {"effort": effort}}
        return {"reasoning_effort": effort}

    def marks_cache(self, model_name: str) -> bool:
        """Whether prompts to the model `model_name` carry `cache_control` breakpoints on their stable prefix."""
        return (self.cache_control_models is not None
                and re.search(self.cache_control_models, model_name.lower()) is not None)

    def output_cap(self, max_tokens: int | None) -> int | None:
        """The output cap a call really asks for: the caller's, lowered to this provider's hard cap."""
        if self.max_output_tokens is None:
            return max_tokens
        return min(max_tokens or self.max_output_tokens, self.max_output_tokens)

# The embedded model is tiny: a hard output cap, a cool temperature ceiling and a context guard keep
# it from rambling or overflowing llama.cpp's 2048-token window.
BUILTIN_PROVIDERS: dict[str, Provider] = {
    "openai": Provider(),
    "local": Provider(
        api_key_env="PARLEY_LOCAL_API_KEY",
        token_param="max_tokens",
        stream_usage=False,  # llama-cpp-python ignores stream_options; usage is estimated instead
        structured_method="json_object_schema",
        schema_in_prompt=True,
        json_string_cap=400,
        context_window=2048,
        max_output_tokens=768,
        max_temperature=1.0,
        # SmolLM2-135M loops on a phrase without a repetition penalty (llama.cpp's own field); in JSON the same
        # penalty made it write `]}`, `[6]` and `{{` inside the strings of every other verdict.
        extra_body={"repeat_penalty": 1.3},
        json_extra_body={"repeat_penalty": 1.0},
        # The embedded server formats chats as ChatML with llama-cpp-python's function calling, each message as written
        # (`core/llama_server.py`): tool calls grammar-constrained, in OpenAI's shape.
        tool_choice_required=False,
        null_assistant_content=False,
        repeats_tool_call_names=True,
        max_concurrent=1,  # llama-cpp-python's server answers one request at a time
        reasoning_models=None,  # SmolLM2 does not reason
        cache_control_models=None,  # llama.cpp reuses its own prefix cache
    ),
}


def split_model_id(model_id: str) -> tuple[str | None, str]:
    """Split `provider:model` into its parts; a bare name has no provider."""
    head, sep, tail = model_id.partition(":")
    if sep and re.fullmatch(r"[a-z][a-z0-9_.-]*", head) and tail:
        return head, tail
    return None, model_id

