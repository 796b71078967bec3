"""model_family groups variants of one lineage and separates lineages."""

import itertools

import pytest

from parley.llm.families import model_family
from parley.llm.providers import split_model_id

# (model id, expected family): real ids from OpenAI, Anthropic, Google, Meta, Mistral, Qwen, DeepSeek.
FAMILIES = [
    ("openai:gpt-5", "gpt-5"),
    ("openai:gpt-5-mini", "gpt-5"),
    ("openai:gpt-5-nano", "gpt-5"),
    ("openai:gpt-5-pro", "gpt-5"),
    ("openai:gpt-4o", "gpt-4o"),
    ("openai:gpt-4o-mini", "gpt-4o"),
    ("openai:gpt-4o-2024-08-06", "gpt-4o"),
    ("openai:gpt-4o-mini-2024-07-18", "gpt-4o"),
    ("openai:gpt-4-turbo-preview", "gpt-4"),
    ("openai:gpt-4-0125-preview", "gpt-4"),
    ("openai:gpt-3.5-turbo-1106", "gpt-3-5"),
    ("openai:gpt-4.1-nano", "gpt-4-1"),
    ("openai:o4-mini", "o4"),
    ("anthropic:claude-sonnet-4-5", "claude-4-5"),
    ("anthropic:claude-sonnet-4-5-20250929", "claude-4-5"),
    ("anthropic:claude-opus-4-5", "claude-4-5"),
    ("anthropic:claude-3-5-sonnet-20240620", "claude-3-5"),
    ("anthropic:claude-3-5-haiku-latest", "claude-3-5"),
    ("openrouter:anthropic/claude-3.5-sonnet:beta", "claude-3-5"),
    ("vertex:claude-3-5-sonnet@20240620", "claude-3-5"),
    ("bedrock:anthropic.claude-3-5-sonnet-20240620-v1:0", "claude-3-5"),
    ("google:gemini-2.5-pro", "gemini-2-5"),
    ("google:gemini-2.5-flash", "gemini-2-5"),
    ("google:gemini-2.5-flash-lite-preview-06-17", "gemini-2-5"),
    ("google:gemini-2.0-flash-exp", "gemini-2-0"),
    ("google:gemini-2-pro", "gemini-2"),
    ("google:gemma-2-9b-it", "gemma-2"),
    ("meta:llama-4-maverick", "llama-4"),
    ("meta:llama-4-scout", "llama-4"),
    ("openrouter:meta-llama/llama-3.1-70b-instruct:free", "llama-3-1"),
    ("meta:llama-3.1-8b-instruct", "llama-3-1"),
    ("mistral:mistral-large-latest", "mistral"),
    ("mistral:mistral-small-2409", "mistral"),
    ("mistral:mixtral-8x7b-instruct", "mixtral"),
    ("mistral:codestral-latest", "codestral"),
    ("qwen:qwen2.5-72b-instruct", "qwen2-5"),
    ("qwen:qwen2.5-coder-32b-instruct", "qwen2-5"),
    ("qwen:qwen3-235b-a22b", "qwen3"),
    ("deepseek:deepseek-chat", "deepseek"),
    ("deepseek:deepseek-v3", "deepseek"),
    ("deepseek:deepseek-r1", "deepseek-r1"),
    ("local:smollm2", "smollm2"),
    ("microsoft:phi-3-mini-4k-instruct", "phi-3"),
]


@pytest.mark.parametrize(("model_id", "family"), FAMILIES)
def test_family_of_real_model_ids(model_id, family):
    assert model_family(model_id) == family


def test_variants_share_a_family_and_lineages_differ():
    assert model_family("openai:gpt-5") == model_family("openai:gpt-5-mini")
    lineages = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro", "meta:llama-4-maverick",
                "mistral:mistral-large-latest", "qwen:qwen3-235b-a22b", "deepseek:deepseek-r1", "openai:gpt-4o"]
    for a, b in itertools.combinations(lineages, 2):
        assert model_family(a) != model_family(b), (a, b)


def test_family_does_not_depend_on_provider():
    assert model_family("azure:gpt-4o") == model_family("openai:gpt-4o") == model_family("gpt-4o")


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("openai:gpt-5", ("openai", "gpt-5")),
        ("gpt-5", (None, "gpt-5")),
        ("openrouter:meta-llama/llama-3.1-8b:free", ("openrouter", "meta-llama/llama-3.1-8b:free")),
        ("Qwen/Qwen2.5-7B", (None, "Qwen/Qwen2.5-7B")),
    ],
)
def test_split_model_id(model_id, expected):
    assert split_model_id(model_id) == expected


def test_the_public_name_is_the_model_layers_function():
    """`parley.model_family` (0.1: `nodes.models.model_family`) is a public name: the model layer's own function."""
    from parley import model_family as public

    assert public is model_family
    assert public("openai:gpt-5") == public("openai:gpt-5-mini") != public("anthropic:claude-sonnet-4-5")
