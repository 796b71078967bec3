"""The model layer: resolution against the provider table, quirks on the wire, usage and cost."""

from __future__ import annotations

import json
import threading

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from parley.core.limits import OFF_LOOP_MESSAGES
from parley.core.settings import Settings
from parley.llm.client import off_loop
from parley.llm.factory import ModelFactory
from parley.llm.failures import ModelError
from parley.llm.prices import lookup_price
from parley.llm.providers import BUILTIN_PROVIDERS, Provider
from parley.llm.tokens import approx_text_tokens, approx_tokens, clip_text, context_guard
from parley.llm.usage import UsageLedger
from parley.nodes.context import RunContext


class Verdict(BaseModel):
    winner: str = Field(description="user, opponent or tie")
    reason: str = Field(description="Why")


def test_default_model_follows_the_environment(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert Settings(_env_file=None).default_model == "local:smollm2"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert Settings(_env_file=None).default_model == "openai:gpt-4o-mini"
    monkeypatch.setenv("OPENAI_MODEL", "anthropic:claude-sonnet-4-5")
    assert Settings(_env_file=None).default_model == "anthropic:claude-sonnet-4-5"


def test_debate_models_from_a_comma_list(monkeypatch):
    monkeypatch.setenv("PARLEY_DEBATE_MODELS", "openai:gpt-5, google:gemini-2.5-pro,anthropic:claude-opus-4-5")
    assert Settings(_env_file=None).parley_debate_models == [
        "openai:gpt-5", "google:gemini-2.5-pro", "anthropic:claude-opus-4-5"]


HOSTED_PANEL = ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash"]


@pytest.fixture
def bare_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "PARLEY_DEBATE_MODELS",
                 "PARLEY_DEBATE_ALLOW_SAME_FAMILY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_debate_preset_defaults_to_the_embedded_model_on_a_fresh_install(bare_env):
    fresh = Settings(_env_file=None)
    assert fresh.uses_embedded_model and fresh.debate_models == ["local:smollm2"]
    assert fresh.debate_allow_same_family is True  # one model, one family: the panel is filled by resampling
    bare_env.setenv("PARLEY_DEBATE_MODELS", "")  # empty is the same as unset
    assert Settings(_env_file=None).debate_models == ["local:smollm2"]


@pytest.mark.parametrize("endpoint", ["OPENAI_API_KEY", "OPENAI_BASE_URL"])
def test_debate_preset_keeps_three_families_when_an_endpoint_is_configured(bare_env, endpoint):
    bare_env.setenv(endpoint, "sk-x" if endpoint == "OPENAI_API_KEY" else "http://127.0.0.1:9/v1")
    configured = Settings(_env_file=None)
    assert configured.debate_models == HOSTED_PANEL and configured.debate_allow_same_family is False


def test_a_configured_debate_list_keeps_the_family_rule_unless_told_otherwise(bare_env):
    bare_env.setenv("PARLEY_DEBATE_MODELS", "local:smollm2")
    configured = Settings(_env_file=None)
    assert configured.debate_models == ["local:smollm2"] and configured.debate_allow_same_family is False
    bare_env.setenv("PARLEY_DEBATE_ALLOW_SAME_FAMILY", "true")
    assert Settings(_env_file=None).debate_allow_same_family is True
    bare_env.delenv("PARLEY_DEBATE_MODELS")
    bare_env.setenv("PARLEY_DEBATE_ALLOW_SAME_FAMILY", "false")
    assert Settings(_env_file=None).debate_allow_same_family is False  # an explicit false wins over the default


def test_resolution_uses_the_table_then_the_default_endpoint(parley_env, llm):
    factory = ModelFactory(parley_env, local_base_url="http://127.0.0.1:9/v1")
    anthropic = factory.resolve("anthropic:claude-sonnet-4-5")
    assert (anthropic.provider_name, anthropic.model_name, anthropic.base_url) == (
        "anthropic", "claude-sonnet-4-5", llm.base_url)
    assert anthropic.provider == BUILTIN_PROVIDERS["openai"]
    local = factory.resolve("local:smollm2")
    assert local.base_url == "http://127.0.0.1:9/v1" and local.provider.structured_method == "json_object_schema"
    bare = factory.resolve("Qwen/Qwen2.5-7B-Instruct")
    assert bare.model_name == "Qwen/Qwen2.5-7B-Instruct" and bare.provider_name == "openai"


def test_local_model_without_server_is_a_clear_error(parley_env):
    with pytest.raises(ModelError, match="embedded model server"):
        ModelFactory(parley_env).resolve("local:smollm2")


def test_providers_file_overrides_the_table(parley_env):
    parley_env.parley_home.mkdir(parents=True, exist_ok=True)
    parley_env.providers_file.write_text(json.dumps(
        {"vllm": {"base_url": "http://127.0.0.1:8001/v1", "token_param": "max_tokens"},
         "openai": {"structured_method": "function_calling"}}))
    parley_env.prices_file.write_text(json.dumps({"my-model": [1.0, 2.0]}))
    factory = ModelFactory(parley_env)
    assert factory.resolve("vllm:any").base_url == "http://127.0.0.1:8001/v1"
    assert factory.resolve("vllm:any").provider.token_param == "max_tokens"
    assert factory.resolve("openai:gpt-5").provider.structured_method == "function_calling"
    assert factory.price("vllm:my-model").cost(1_000_000, 1_000_000) == pytest.approx(3.0)


def test_broken_providers_file_is_an_error(parley_env):
    parley_env.parley_home.mkdir(parents=True, exist_ok=True)
    parley_env.providers_file.write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        ModelFactory(parley_env)


def test_prices_exact_prefix_and_unknown():
    prices = {"gpt-4o": (2.5, 10.0), "gpt-4o-mini": (0.15, 0.6)}
    assert lookup_price("openai:gpt-4o-mini-2024-07-18", prices).input == 0.15
    assert lookup_price("openai:gpt-4o", prices).known
    unknown = lookup_price("acme:mystery", prices)
    assert (unknown.known, unknown.cost(1000, 1000)) == (False, 0.0)


async def test_streamed_call_records_usage_and_cost(parley_env, llm):
    llm.script(model="gpt-4o-mini", reply="Streaming works across several small chunks of text.")
    ledger = UsageLedger()
    chat = ModelFactory(parley_env).chat("openai:gpt-4o-mini", max_tokens=50, ledger=ledger, label="speaker")
    chunks = [c.content async for c in chat.astream([HumanMessage("hi there")])]
    assert len([c for c in chunks if c]) > 1
    assert "".join(chunks) == "Streaming works across several small chunks of text."
    body = llm.requests[-1]
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_completion_tokens"] == 50
    [record] = ledger.records
    assert record.input_tokens > 0 and record.output_tokens > 0 and record.label == "speaker"
    assert record.cost == pytest.approx((record.input_tokens * 0.15 + record.output_tokens * 0.6) / 1e6)
    assert ledger.by_model()["openai:gpt-4o-mini"]["calls"] == 1


async def test_token_param_quirks_reach_the_wire(parley_env, llm):
    providers = {
        "openai": Provider(),
        "legacy": Provider(token_param="max_tokens", stream_usage=False),
        "llamacpp": Provider(token_param="max_tokens", max_output_tokens=32, max_temperature=0.5),
    }
    factory = ModelFactory(parley_env, providers=providers)
    await factory.chat("legacy:m", max_tokens=40).ainvoke([HumanMessage("x")])
    assert llm.requests[-1]["max_tokens"] == 40 and "max_completion_tokens" not in llm.requests[-1]
    await factory.chat("llamacpp:m", max_tokens=400, temperature=1.5).ainvoke([HumanMessage("x")])
    sent = llm.requests[-1]
    assert sent["max_tokens"] == 32 and sent["temperature"] == 0.5 and "max_completion_tokens" not in sent


@pytest.mark.parametrize("method", ["json_schema", "json_object_schema", "function_calling"])
async def test_structured_output_by_each_method(parley_env, llm, method):
    factory = ModelFactory(parley_env, providers={"openai": Provider(structured_method=method)})
    llm.script(json={"winner": "tie", "reason": "Both sides argued well."})
    ledger = UsageLedger()
    verdict = await factory.structured(Verdict, "openai:gpt-5", ledger=ledger).ainvoke([HumanMessage("judge")])
    assert verdict == Verdict(winner="tie", reason="Both sides argued well.")
    sent = llm.requests[-1]
    if method == "json_schema":
        assert sent["response_format"]["type"] == "json_schema"
    elif method == "json_object_schema":
        assert sent["response_format"]["type"] == "json_object" and "schema" in sent["response_format"]
    else:
        assert sent["tools"][0]["function"]["name"] == "Verdict"
    assert ledger.records and ledger.records[0].model == "openai:gpt-5"


async def test_run_context_bills_its_own_ledger(parley_env, llm):
    ctx = RunContext(models=ModelFactory(parley_env), model="openai:gpt-5-mini")
    await ctx.chat(label="a").ainvoke([HumanMessage("one")])
    await ctx.chat("anthropic:claude-haiku-4-5", label="b").ainvoke([HumanMessage("two")])
    assert [r.model for r in ctx.ledger.records] == ["openai:gpt-5-mini", "anthropic:claude-haiku-4-5"]
    assert set(ctx.ledger.by_label()) == {"a", "b"}
    assert llm.requests[1]["model"] == "claude-haiku-4-5"


def test_context_guard_keeps_system_and_latest_turns():
    messages = [SystemMessage("rules")] + [HumanMessage(f"turn {i} " + "word " * 200) for i in range(20)]
    trimmed = context_guard(window=2048, reserve=300).invoke(messages)
    assert trimmed[0].content == "rules" and trimmed[-1].content.startswith("turn 19")
    assert approx_tokens(trimmed) <= 2048 - 300
    assert approx_tokens([HumanMessage("远程工作")]) > approx_tokens([HumanMessage("abcd")])


def test_prompt_budget_follows_the_providers_window_and_output_cap(parley_env):
    factory = ModelFactory(parley_env, providers={**BUILTIN_PROVIDERS, "small": Provider(context_window=1000)})
    local = BUILTIN_PROVIDERS["local"]
    # The embedded model's output cap applies even when the caller asks for more (or nothing).
    expected = local.context_window - local.max_output_tokens - 32
    assert factory.prompt_budget("local:smollm2") == factory.prompt_budget("local:smollm2", 5000) == expected
    assert factory.prompt_budget("local:smollm2", 100) == local.context_window - 132
    assert factory.prompt_budget("small:x", 200) == 1000 - 232
    assert factory.prompt_budget("openai:gpt-5") is None  # no window known: nothing to fit


def test_clip_text_cuts_at_a_word_and_marks_the_cut():
    text = "word " * 400
    clipped = clip_text(text, 50, " [...]")
    assert clipped.endswith("word [...]") and approx_text_tokens(clipped) <= 50
    assert clip_text("short answer", 50) == "short answer"
    cjk = clip_text("远" * 300, 40)
    assert approx_text_tokens(cjk) <= 40 and cjk.startswith("远")


def test_run_context_of_widens_a_plain_context_and_defaults_when_none():
    from dataclasses import dataclass
    from types import SimpleNamespace

    @dataclass(kw_only=True)
    class ModeContext(RunContext):
        rounds: int = 3

    plain = RunContext(model="openai:gpt-5")
    widened = ModeContext.of(SimpleNamespace(context=plain))
    assert isinstance(widened, ModeContext) and widened.rounds == 3
    assert widened.model == "openai:gpt-5" and widened.ledger is plain.ledger
    own = ModeContext(rounds=7)
    assert ModeContext.of(SimpleNamespace(context=own)) is own
    first, second = ModeContext.of(None), ModeContext.of(SimpleNamespace(context=None))
    assert first.rounds == 3 and first.ledger is not second.ledger  # no ledger shared between runs


async def test_models_are_built_once_per_loop_and_bill_each_callers_ledger(parley_env, llm):
    factory = ModelFactory(parley_env)
    first, second = UsageLedger(), UsageLedger()
    a = factory.structured(Verdict, "openai:gpt-5", ledger=first, label="one")
    b = factory.structured(Verdict, "openai:gpt-5", ledger=second, label="two")
    assert a.bound is b.bound  # one client and schema, two usage callbacks
    await a.ainvoke([HumanMessage("judge")])
    await b.ainvoke([HumanMessage("judge")])
    assert [r.label for r in first.records] == ["one"] and [r.label for r in second.records] == ["two"]
    assert factory.chat("openai:gpt-5", temperature=0.1) is not factory.chat("openai:gpt-5", temperature=0.2)


CONVERSATION = [
    SystemMessage("Be brief."),
    HumanMessage(content=[{"type": "text", "text": "What is in this picture?"},
                          {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}],
                 name="ann"),
    AIMessage("", tool_calls=[{"id": "call_1", "name": "lookup", "args": {"q": "cap"}}]),
    ToolMessage("CAP: pick two of three.", tool_call_id="call_1"),
    HumanMessage("And in two sentences, é 中文?"),
]


@pytest.mark.parametrize("turns", [0, OFF_LOOP_MESSAGES])
@pytest.mark.parametrize("stream", [False, True])
async def test_requests_reach_the_wire_exactly_as_langchain_openai_sends_them(parley_env, llm, stream, turns):
    # Parley hands the messages to the SDK as `extra_body` (skipping its per-message walk) and converts a long
    # conversation on a worker thread: the body must not change.
    conversation = [*CONVERSATION[:-1], *[(HumanMessage if i % 2 else AIMessage)(f"turn {i}") for i in range(turns)],
                    CONVERSATION[-1]]
    providers = {"openai": Provider(extra_body={"repeat_penalty": 1.3})}
    parley = ModelFactory(parley_env, providers=providers).chat("openai:gpt-5", temperature=0.3, max_tokens=50)
    plain = ChatOpenAI(model="gpt-5", api_key="sk-test", base_url=llm.base_url, max_retries=0, temperature=0.3,
                       max_completion_tokens=50, stream_usage=True, extra_body={"repeat_penalty": 1.3})
    bodies = []
    for chat in (parley, plain):
        if stream:
            [chunk async for chunk in chat.astream(conversation)]
        else:
            await chat.ainvoke(conversation)
        bodies.append(llm.requests[-1])
    assert json.dumps(bodies[0]) == json.dumps(bodies[1])  # the same fields, values and order
    assert len(bodies[0]["messages"]) == len(conversation) and bodies[0]["repeat_penalty"] == 1.3


async def test_a_long_conversation_is_converted_off_the_event_loop(parley_env, llm, monkeypatch):
    import langchain_openai.chat_models.base as lc_base

    loop_thread, threads = threading.get_ident(), []
    convert = lc_base._convert_message_to_dict

    def spy(message, *args, **kwargs):
        threads.append(threading.get_ident())
        return convert(message, *args, **kwargs)

    monkeypatch.setattr(lc_base, "_convert_message_to_dict", spy)
    chat = ModelFactory(parley_env).chat("openai:gpt-5")
    await chat.ainvoke([HumanMessage("short")])
    assert threads == [loop_thread]  # a short one is not worth a thread hop
    threads.clear()
    long = [HumanMessage(f"turn {i}") for i in range(OFF_LOOP_MESSAGES)]
    await chat.ainvoke(long)
    [chunk async for chunk in chat.astream(long)]
    # Converted once, on a worker thread: the second call (a panel's next panelist) takes the same request messages.
    assert len(threads) == OFF_LOOP_MESSAGES and loop_thread not in threads
    assert llm.requests[-1]["messages"] == llm.requests[-2]["messages"]
    assert [m["content"] for m in llm.requests[-1]["messages"]] == [m.content for m in long]
    await chat.ainvoke([*long[:-1], HumanMessage("changed")])  # other messages: converted anew
    assert len(threads) == 2 * OFF_LOOP_MESSAGES and llm.requests[-1]["messages"][-1]["content"] == "changed"
    assert await off_loop(OFF_LOOP_MESSAGES - 1, threading.get_ident) == loop_thread
    assert await off_loop(OFF_LOOP_MESSAGES, threading.get_ident) != loop_thread


def test_a_cached_prompt_token_costs_the_cached_price_where_the_table_has_one(parley_env):
    parley_env.parley_home.mkdir(parents=True, exist_ok=True)
    parley_env.prices_file.write_text(json.dumps({"my-model": [1.0, 2.0, 0.1], "plain-model": [1.0, 2.0]}))
    factory = ModelFactory(parley_env)
    cached = factory.price("my-model")
    assert cached.cost(1_000_000, 0, cached_tokens=800_000) == pytest.approx(0.2 + 0.08)
    assert cached.cost(1_000_000, 1_000_000) == pytest.approx(3.0)
    assert factory.price("plain-model").cost(1_000_000, 0, cached_tokens=800_000) == pytest.approx(1.0)
    assert factory.price("gpt-5").cost(1_000_000, 0, cached_tokens=1_000_000) == pytest.approx(0.125)
