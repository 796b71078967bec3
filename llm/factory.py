"""The model factory: every chat model Parley uses, built from the provider table and the deployment settings.

Every model call in Parley goes through `ModelFactory.chat` or `ModelFactory.structured`, which build
`llm.client.BoundedChatOpenAI` clients (langchain-openai's `ChatOpenAI`) for an OpenAI-compatible endpoint,
with the provider's quirks (`llm.providers`) applied, the context guard (`llm.tokens`) in front, the call
recorder (`llm.usage`) bound to each call, and for a run with a budget its check (`llm.budget.BudgetGuard`).
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from langchain_core.caches import BaseCache
from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import ensure_config, merge_configs
from langchain_core.utils.function_calling import convert_to_openai_function
from openai import DEFAULT_CONNECTION_LIMITS, DefaultAsyncHttpxClient
from pydantic import BaseModel

from parley.core import metrics
from parley.core.settings import Settings, get_settings
from parley.llm.caching import MarkedCache
from parley.llm.budget import Budget, BudgetGuard, CallEstimate, estimate_call
from parley.llm.client import HAS_CHUNK_TIMEOUT, BoundedChatOpenAI, WholeAnswerTransport
from parley.llm.failures import ModelError, register_secret
from parley.llm.formats import AnswerFormat, StructuredAnswerParser, cap_strings, schema_note
from parley.llm.prices import BUILTIN_PRICES, Price, lookup_price
from parley.llm.providers import BUILTIN_PROVIDERS, DEFAULT_PROVIDER, REASONING_EFFORTS, Provider, split_model_id
from parley.llm.tokens import answer_reserve, context_guard, prompt_limit
from parley.llm.tools import ToolSet
from parley.llm.usage import CallRecorder, UsageLedger

SchemaT = TypeVar("SchemaT", bound=BaseModel)


@dataclass(frozen=True)
class _Knobs:
    """A call's reasoning effort, seed and response cache (part of the key its client is kept under)."""

    reasoning_effort: str | None = None
    seed: int | None = None
    cache: BaseCache | None = None

@dataclass(frozen=True)
class ResolvedModel:
    """A model id resolved against the provider table."""

    model_id: str
    provider_name: str
    provider: Provider
    model_name: str
    base_url: str | None
    api_key: str


def load_json_overrides(path: Path) -> dict[str, Any]:
    """Read an optional JSON config file under PARLEY_HOME; a broken file is an error, not silence."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{path} must hold a JSON object")
    return data


class ModelFactory:
    """Build every chat model Parley calls, for the endpoint and models that `settings` and the provider table name.

    Each model it builds sends OpenAI-compatible chat completions with its provider's quirks, records the usage of
    every call (in a run's ledger, with its price) and checks a run's budget first. Hand it to a run as
    `RunContext(models=factory)`; without one, a run uses the process-wide factory built from the environment.

    Args:
        settings: deployment settings (endpoint, key, default model, PARLEY_HOME); None: read from the environment.
        providers: provider table; defaults to the built-in one merged with `PARLEY_HOME/providers.json`.
        prices: price table; defaults to the built-in one merged with `PARLEY_HOME/prices.json`.
        local_base_url: where the embedded model server listens, when it runs.

    Raises:
        ModelError: `providers.json` or `prices.json` is not a JSON object; (when a model is built) a model id with
            no endpoint or key to reach it.

    Example:
        >>> import parley
        >>> settings = parley.Settings(openai_base_url="http://127.0.0.1:8001/v1", openai_api_key="sk-none",
        ...                            openai_model="Qwen/Qwen2.5-7B-Instruct")
        >>> parley.ModelFactory(settings).default_model
        'Qwen/Qwen2.5-7B-Instruct'

        A run on that endpoint (docs/python.md, own_endpoint.py):

        ```python
        context = parley.RunContext(models=parley.ModelFactory(settings))
        out = await parley.build_panel_graph().compile().ainvoke(parley.question_input("..."), context=context)
        ```
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        providers: dict[str, Provider] | None = None,
        prices: dict[str, tuple[float, ...]] | None = None,
        local_base_url: str | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        if providers is None:
            providers = dict(BUILTIN_PROVIDERS)
            for name, raw in load_json_overrides(self.settings.providers_file).items():
                base = providers.get(name, Provider()).model_dump()
                providers[name] = Provider.model_validate({**base, **raw})
        self.providers = providers
        if prices is None:
            prices = dict(BUILTIN_PRICES)
            for name, row in load_json_overrides(self.settings.prices_file).items():
                prices[name.lower()] = tuple(float(x) for x in row[:3])
        self.prices = prices
        self.local_base_url = local_base_url or os.environ.get("PARLEY_LOCAL_BASE_URL")
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, dict]] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def default_model(self) -> str:
        return self.settings.default_model

    def resolve(self, model_id: str | None = None) -> ResolvedModel:
        """Resolve `provider:model` (or a bare name, or None for the default) to an endpoint and quirks."""
        model_id = model_id or self.default_model
        provider_name, model_name = split_model_id(model_id)
        provider_name = provider_name or DEFAULT_PROVIDER
        provider = self.provider(model_id)
        if provider_name == "local":
            base_url = provider.base_url or self.local_base_url
            if not base_url:
                raise ModelError(
                    f"{model_id} needs the embedded model server, which is not running; "
                    "start Parley with `parley serve` or set OPENAI_BASE_URL/OPENAI_API_KEY"
                )
            api_key = os.environ.get(provider.api_key_env, "sk-local")
        else:
            base_url = provider.base_url or self.settings.openai_base_url
            key_from_env = os.environ.get(provider.api_key_env)
            if provider.api_key_env == "OPENAI_API_KEY":
                key_from_env = key_from_env or self.settings.openai_api_key
            # Self-hosted endpoints (vLLM, llama.cpp) take any key; the SDK insists on one.
            api_key = key_from_env or ("sk-none" if base_url else "")
            if not api_key:
                raise ModelError(f"{model_id}: no API key (set {provider.api_key_env}) and no OPENAI_BASE_URL")
        register_secret(api_key)  # an endpoint that echoes it back must not get it into a message
        return ResolvedModel(model_id, provider_name, provider, model_name, base_url, api_key)

    def unusable(self, model_id: str) -> str | None:
        """Why `model_id` cannot be called here, naming its provider (None when it can): a provider the table does
        not know with no gateway (`OPENAI_BASE_URL`) to send it to, or one with no endpoint or key configured."""
        provider_name = split_model_id(model_id)[0] or DEFAULT_PROVIDER
        if provider_name not in self.providers and not self.settings.openai_base_url:
            return (f"'{model_id}': unknown provider '{provider_name}' (the provider table has "
                    f"{', '.join(sorted(self.providers))}); add it to PARLEY_HOME/providers.json, or set "
                    "OPENAI_BASE_URL to a gateway that serves it")
        try:
            self.resolve(model_id)
        except ModelError as exc:
            return f"'{model_id}': provider '{provider_name}' is not configured here ({exc})"
        return None

    def provider(self, model_id: str | None = None) -> Provider:
        """The provider entry (quirks) `model_id` uses; unlike `resolve`, this needs no endpoint or key."""
        provider_name = split_model_id(model_id or self.default_model)[0] or DEFAULT_PROVIDER
        return self.providers.get(provider_name) or self.providers.get(DEFAULT_PROVIDER) or Provider()

    def prompt_budget(self, model_id: str | None = None, max_tokens: int | None = None) -> int | None:
        """Tokens a prompt to `model_id` may take before the context guard trims it (None: no limit).

        `max_tokens` is the output cap the call will ask for; the provider's own cap applies on top,
        as it does in `chat`.
        """
        quirks = self.provider(model_id)
        if quirks.context_window is None:
            return None
        return prompt_limit(quirks.context_window, answer_reserve(quirks.output_cap(max_tokens)))

    def estimate(self, model_id: str | None, prompt: Sequence[BaseMessage] | int, max_tokens: int | None,
                 schema: type[BaseModel] | None = None) -> CallEstimate:
        """The reserved estimate of a call to `model_id` with this prompt (messages, or their tokens) and output cap
        (or structured answer `schema`), as the budget check of that call makes it (`llm.budget.estimate_call`)."""
        resolved = self.resolve(model_id)
        return estimate_call(prompt, resolved.provider.output_cap(max_tokens), self.price(resolved.model_id), schema)

    def price(self, model_id: str) -> Price:
        return lookup_price(model_id, self.prices)

    def metric_label(self, model_id: str) -> str:
        """The `model` label of `model_id` in `/metrics`: the id itself when the deployment knows it, else `other`.

        Requests name models freely, and every distinct label is a series `/metrics` keeps for good, so only
        ids the deployment configured get their own: the settings' models (default, `router/debate` preset,
        arbitrator), and the price table's names (built in and `prices.json`, exactly as written there) under
        a provider of the provider table or of those models. Models of a workspace's own routers count as
        `other` unless they are among these.
        """
        configured = {self.default_model, self.settings.arbitrator_model, *self.settings.debate_models}
        if model_id in configured:
            return model_id
        provider, name = split_model_id(model_id)
        providers = {*self.providers, *(split_model_id(m)[0] for m in configured)}
        if (provider is None or provider in providers) and name in self.prices:
            return model_id
        return metrics.OTHER_MODEL

    def chat(
        self,
        model_id: str | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        ledger: UsageLedger | None = None,
        label: str | None = None,
        budget: Budget | None = None,
        tools: ToolSet | None = None,
        answer_format: AnswerFormat | None = None,
        reasoning_effort: str | None = None,
        seed: int | None = None,
        cache: BaseCache | None = None,
    ) -> Runnable:
        """Return a chat model (behind the context guard) for `model_id`.

        The result accepts a list of messages and supports `ainvoke` and `astream`; token usage of
        every call, streamed ones included, lands in `ledger` when one is given, and in the process
        metrics (`core.metrics`) always. With a `budget`, a call that would take the run past it is refused
        before it is sent (`llm.budget.BudgetGuard`).

        With `tools` the model may answer with tool calls (`bind_tools`, with the set's `tool_choice` and
        `parallel_tool_calls`); with `answer_format` it is asked for that JSON in the provider's dialect
        (`AnswerFormat.request_field`) and sampled as the provider wants JSON sampled (`json_extra_body`).
        Neither checks the answer: `nodes.arbitrate.stream_first_answer` does.

        `reasoning_effort` (one of `llm.providers.REASONING_EFFORTS`) is sent as the provider takes it
        (`Provider.reasoning_fields`); `seed` as OpenAI's `seed`. With a response `cache` (LangChain's `BaseCache`:
        `store.response_cache.ResponseCache`), a call at temperature 0 or with a seed is answered from it when an
        identical one (model, messages, parameters) was made before, and stored in it otherwise; other calls ignore it.

        Raises:
            ModelError: a reasoning effort asked of a model that takes none (`reasoning_problem`).
        """
        return self._model(None, model_id, temperature, max_tokens, timeout, ledger, label, tools, answer_format,
                           budget, _Knobs(reasoning_effort, seed, cache))

    def structured(
        self,
        schema: type[SchemaT],
        model_id: str | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        ledger: UsageLedger | None = None,
        label: str | None = None,
        budget: Budget | None = None,
        reasoning_effort: str | None = None,
        seed: int | None = None,
        cache: BaseCache | None = None,
    ) -> Runnable:
        """Return a runnable that answers with an instance of `schema`, using the provider's structured-output method
        (billed and checked, reasoning and cached as `chat`)."""
        return self._model(schema, model_id, temperature, max_tokens, timeout, ledger, label, budget=budget,
                           knobs=_Knobs(reasoning_effort, seed, cache))

    def reasoning_problem(self, model_id: str | None, effort: str | None) -> str | None:
        """Why `effort` cannot be asked of `model_id` (None when it can, or none is asked): not an effort Parley knows
        (`llm.providers.REASONING_EFFORTS`), or a model its provider's table entry says takes none
        (`Provider.reasoning_models`)."""
        if effort is None:
            return None
        if effort not in REASONING_EFFORTS:
            return f"reasoning effort '{effort}' is not one of {', '.join(REASONING_EFFORTS)}"
        model_id = model_id or self.default_model
        if not self.provider(model_id).reasons(split_model_id(model_id)[1]):
            return (f"'{model_id}' takes no reasoning effort (not a reasoning model in the provider table; a "
                    "deployment names its own with `reasoning_models` in PARLEY_HOME/providers.json)")
        return None

    def _model(
        self,
        schema: type[BaseModel] | None,
        model_id: str | None,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float | None,
        ledger: UsageLedger | None,
        label: str | None,
        tools: ToolSet | None = None,
        answer_format: AnswerFormat | None = None,
        budget: Budget | None = None,
        knobs: _Knobs | None = None,
    ) -> Runnable:
        """The model runnable for these knobs, built once per event loop; the call recorder is bound per call."""
        resolved = self.resolve(model_id)
        knobs = knobs or _Knobs()
        if problem := self.reasoning_problem(resolved.model_id, knobs.reasoning_effort):
            raise ModelError(problem)
        if knobs.cache is not None and temperature != 0 and knobs.seed is None:
            knobs = _Knobs(knobs.reasoning_effort, knobs.seed)  # a sampled answer is not the same answer twice
        key = (schema, resolved.model_id, resolved.base_url, resolved.api_key, temperature, max_tokens, timeout,
               tools.key if tools else None, answer_format.key if answer_format else None, knobs)
        cache = self._loop_cache("runnables")
        runnable = cache.get(key) if cache is not None else None
        if runnable is None:
            runnable = self._build(schema, resolved, temperature, max_tokens, timeout, tools, answer_format, knobs)
            if cache is not None:
                cache[key] = runnable
        # Building a client (and a structured-output schema) costs milliseconds; binding a callback does not.
        price = self.price(resolved.model_id)
        callbacks: list[Any] = [CallRecorder(ledger, resolved.model_id, price, label, self.metric_label(resolved.model_id))]
        if budget is not None and budget.limits:
            callbacks.append(BudgetGuard(budget, model_id=resolved.model_id, price=price,
                                         max_tokens=resolved.provider.output_cap(max_tokens), schema=schema))
        return _Recorded(bound=runnable, config={"callbacks": callbacks})

    def _build(
        self,
        schema: type[BaseModel] | None,
        resolved: ResolvedModel,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float | None,
        tools: ToolSet | None = None,
        answer_format: AnswerFormat | None = None,
        knobs: _Knobs | None = None,
    ) -> Runnable:
        quirks = resolved.provider
        knobs = knobs or _Knobs()
        max_tokens = quirks.output_cap(max_tokens)
        if temperature is not None and quirks.max_temperature is not None:
            temperature = min(temperature, quirks.max_temperature)
        read_timeout = timeout or self.settings.parley_request_timeout
        kwargs: dict[str, Any] = {
            "model": resolved.model_name,
            "api_key": resolved.api_key,
            "timeout": read_timeout,
            "call_deadline": self.settings.parley_model_call_deadline,
            "chunk_gap": read_timeout,  # the longest wait for a streamed chunk (BoundedChatOpenAI's own timer)
            "parley_model_id": resolved.model_id,
            "max_retries": 0,  # retries are node policies (RetryPolicy), never hidden in the client
            "stream_usage": quirks.stream_usage,
            "null_assistant_content": quirks.null_assistant_content,
            "repeats_tool_call_names": quirks.repeats_tool_call_names,
            "max_concurrent": quirks.max_concurrent,
        }
        if HAS_CHUNK_TIMEOUT:
            # langchain-openai's own limit on the gap between streamed chunks (120 s unless told) is off: `chunk_gap`
            # bounds it; older releases have no such field (and would send an unknown one on to the endpoint).
            kwargs["stream_chunk_timeout"] = None
        if resolved.base_url:
            kwargs["base_url"] = resolved.base_url
        if temperature is not None:
            kwargs["temperature"] = temperature
        json_answer = schema is not None or answer_format is not None
        extra_body = {**quirks.extra_body, **(quirks.json_extra_body if json_answer else {})}
        if max_tokens is not None:
            if quirks.token_param == "max_tokens":
                # langchain-openai renames its own max_tokens field; extra_body sends the legacy name as is.
                extra_body["max_tokens"] = max_tokens
            else:
                kwargs["max_completion_tokens"] = max_tokens
        if knobs.reasoning_effort is not None:
            fields = quirks.reasoning_fields(knobs.reasoning_effort)
            if "reasoning_effort" in fields:
                kwargs["reasoning_effort"] = fields.pop("reasoning_effort")
            extra_body.update(fields)
        if knobs.seed is not None:
            kwargs["seed"] = knobs.seed
        if knobs.cache is not None:
            kwargs["cache"] = MarkedCache(knobs.cache, answer_format=answer_format, schema=schema)
        if quirks.marks_cache(resolved.model_name):
            kwargs["cache_marks_from"] = quirks.cache_min_tokens
        if extra_body:
            kwargs["extra_body"] = extra_body
        if (http_client := self._loop_http_client(kwargs["timeout"])) is not None:
            kwargs["http_async_client"] = http_client
        client = BoundedChatOpenAI(**kwargs)
        if schema is None:
            model: Runnable = client
            if tools is not None:
                model = client.bind_tools(list(tools.tools), **tools.bind_kwargs(required=quirks.tool_choice_required))
            if answer_format is not None:
                model = model.bind(response_format=answer_format.request_field(quirks.structured_method,
                                                                               quirks.json_string_cap))
            json_schema = answer_format.schema if answer_format is not None else None
            return self._noted(quirks, json_schema, self._guarded(resolved, max_tokens, model))
        json_schema = schema.model_json_schema()
        if quirks.structured_method == "json_object_schema":
            grammar = cap_strings(json_schema, quirks.json_string_cap) if quirks.json_string_cap else json_schema
            fmt = {"type": "json_object", "schema": grammar}
            answer = client.bind(response_format=fmt) | StructuredAnswerParser(pydantic_object=schema)
        elif quirks.structured_method == "json_schema":
            # Read by Parley's parser after the call has ended (and been recorded, `llm.usage.CallRecorder`): the
            # openai SDK's own parsing (`with_structured_output`'s) fails inside the call, and its usage with it.
            answer = client.bind(response_format=json_schema_format(schema)) | StructuredAnswerParser(
                pydantic_object=schema)
        else:
            answer = client.with_structured_output(schema, method=quirks.structured_method)
        return self._noted(quirks, json_schema, self._guarded(resolved, max_tokens, answer))

    def _loop_cache(self, name: str) -> dict | None:
        """A dict private to the running event loop (None outside one): what it holds is bound to that loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return self._per_loop.setdefault(loop, {}).setdefault(name, {})

    def _loop_http_client(self, timeout: float) -> DefaultAsyncHttpxClient | None:
        """A pooled HTTP client for the running event loop (None outside one).

        langchain-openai otherwise shares one client per process, whose connections belong to the loop
        that opened them: a second `asyncio.run` (or a second server's loop) would get "Event loop is closed".
        """
        clients = self._loop_cache("http_clients")
        if clients is None:
            return None
        if timeout not in clients:
            clients[timeout] = DefaultAsyncHttpxClient(timeout=timeout, transport=WholeAnswerTransport(
                timeout, limits=DEFAULT_CONNECTION_LIMITS))
        return clients[timeout]

    @staticmethod
    def _noted(quirks: Provider, json_schema: dict[str, Any] | None, model: Runnable) -> Runnable:
        """`model` told the fields of `json_schema` in its system message, where the provider wants it
        (`Provider.schema_in_prompt`): before the context guard, which keeps the system message."""
        if json_schema is None or not quirks.schema_in_prompt:
            return model
        note = schema_note(json_schema)

        def with_note(messages: list[BaseMessage]) -> list[BaseMessage]:
            if messages and isinstance(messages[0], SystemMessage):
                return [SystemMessage(f"{messages[0].text}\n\n{note}"), *messages[1:]]
            return [SystemMessage(note), *messages]

        return RunnableLambda(with_note) | model

    @staticmethod
    def _guarded(resolved: ResolvedModel, max_tokens: int | None, model: Runnable) -> Runnable:
        """`model` behind the context guard when the provider declares a window (a bare model otherwise)."""
        window = resolved.provider.context_window
        if window is None:
            return model
        return context_guard(window, reserve=answer_reserve(max_tokens)) | model


def json_schema_format(schema: type[BaseModel]) -> dict[str, Any]:
    """OpenAI's `response_format` for answers of `schema`, as langchain-openai's `with_structured_output(schema,
    method="json_schema")` sends it (not strict)."""
    function = convert_to_openai_function(schema, strict=False)
    function["schema"] = function.pop("parameters")
    return {"type": "json_schema", "json_schema": function}


class _Recorded(RunnableBinding):
    """A model runnable whose call recorder joins the callbacks the call inherits.

    `with_config(callbacks=[...])` would replace them instead: a model called inside a graph node
    (without an explicit config, as nodes do) would lose the node's callback manager, so its span
    would start a trace of its own instead of sitting under its node and run.
    """

    def _merge_configs(self, *configs: RunnableConfig | None) -> RunnableConfig:
        return merge_configs(ensure_config(merge_configs(*configs)), self.config)

