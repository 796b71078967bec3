"""Model families: which models share a lineage, so a panel can seat models that reason differently."""

from __future__ import annotations

import re
from collections.abc import Sequence

from parley.llm.providers import split_model_id

# Words that name a size, tier or release channel of a model rather than its lineage.
_VARIANT_WORDS = {
    "mini", "nano", "pro", "flash", "lite", "turbo", "preview", "latest", "exp", "experimental",
    "instruct", "chat", "it", "hf", "sonnet", "opus", "haiku", "maverick", "scout", "large",
    "medium", "small", "tiny", "plus", "max", "coder", "vision", "online", "fast", "thinking",
    "base", "free", "beta", "nitro", "fp8", "gguf", "awq", "q4", "q8",
}
_DATE = re.compile(r"[-@_]?(\d{4}-\d{2}-\d{2}|\d{4}_\d{2}_\d{2})|-\d{2}-\d{2}$")
_NOISE_TOKEN = re.compile(
    r"^(\d{4,8}"  # date stamps and version tags: 0125, 1106, 20240620
    r"|v\d+(\.\d+)*"  # v1, v2.5
    r"|\d+(\.\d+)?[bm]"  # parameter counts: 8b, 1.5b, 135m
    r"|a\d+(\.\d+)?b"  # active parameters: a22b
    r"|\d+x\d+(\.\d+)?b"  # mixture sizes: 8x7b
    r"|e\d+b"  # effective sizes: e4b
    r"|\d+k"  # context sizes: 4k, 128k
    r")$"
)



def model_family(model_id: str) -> str:
    """Return the family of a model: equal for variants of one lineage, different across lineages.

    Variant suffixes (size tiers such as -mini/-pro/-flash, release channels such as -preview,
    date stamps, version tags, parameter counts, `:free`-style routing tags and vendor paths) are
    stripped, and dots become dashes so `claude-3.5` and `claude-3-5` agree.

    >>> from parley import model_family
    >>> model_family("openai:gpt-5-mini") == model_family("openai:gpt-5")
    True
    >>> model_family("anthropic:claude-sonnet-4-5-20250929")
    'claude-4-5'
    """
    _, name = split_model_id(model_id.strip())
    name = name.lower().split("@", 1)[0]  # Vertex-style "@20240620" stamps
    name = name.split(":", 1)[0]  # routing tags like ":free" or Bedrock's ":0"
    name = name.rsplit("/", 1)[-1]  # gateway vendor paths: "meta-llama/llama-4-scout"
    name = re.sub(r"^[a-z]+\.(?=[a-z])", "", name)  # Bedrock vendor prefixes: "anthropic.claude-…"
    name = _DATE.sub("", name)
    name = re.sub(r"(?<=\d)\.(?=\d)", "-", name)
    tokens = [t for t in re.split(r"[-_\s]+", name) if t]
    kept = [t for t in tokens if t not in _VARIANT_WORDS and not _NOISE_TOKEN.match(t)]
    return "-".join(kept or tokens) or name


def independent_first(candidates: Sequence[str], panel: Sequence[str]) -> tuple[list[str], bool]:
    """Order `candidates` (an arbitrator's or a judge's fallback chain) so that those of a family not on `panel`
    come first, keeping the order within each group; say whether the first one is such an outsider.

    Judges favour text of their own family (Panickssery et al. 2024), so a decision is best left to a family
    that wrote none of the answers, when one is configured; otherwise the chain is kept as it was.

    >>> independent_first(["anthropic:claude-opus-4-5", "openai:gpt-4o"], ["anthropic:claude-sonnet-4-5"])
    (['openai:gpt-4o', 'anthropic:claude-opus-4-5'], True)
    >>> independent_first(["openai:gpt-5-mini"], ["openai:gpt-5"])
    (['openai:gpt-5-mini'], False)
    """
    seated = {model_family(m) for m in panel}
    chain = list(dict.fromkeys(candidates))
    outside = [m for m in chain if model_family(m) not in seated]
    return outside + [m for m in chain if m not in outside], bool(outside)
