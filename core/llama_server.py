"""The embedded model server's process: llama-cpp-python's OpenAI-compatible server, with a chat format that gives
the model every message as it was written (`python -m parley.core.llama_server`, `core.embedded.model_server`).

llama-cpp-python's `chatml-function-calling` format (ChatML, and tool calls in OpenAI's shape) renders its Jinja
template with HTML autoescape on: SmolLM2 read `you&#39;re &#34;ok&#34; &lt;b&gt;` for `you're "ok" <b>`, and wrote
the entities back into its answers. `CHAT_FORMAT` is that format with the text of each message, and of each tool
call's arguments, marked safe (`markupsafe.Markup`), which an autoescaping template writes as it is; everything else
(the template, the tool grammar) is llama-cpp-python's own.

Its RAM prompt cache (`--cache true --cache_type ram`) is `core.llama_cache.PromptCache`, whose size is what it holds.
"""

from __future__ import annotations

from typing import Any

CHAT_FORMAT = "parley-chatml-function-calling"


def verbatim(message: dict[str, Any]) -> dict[str, Any]:
    """`message` (an OpenAI chat message) with its text and its tool calls' arguments marked safe: an autoescaping
    template writes them unescaped."""
    from markupsafe import Markup  # Jinja2's, which comes with llama-cpp-python (the `embedded` extra)

    message = dict(message)
    if isinstance(message.get("content"), str):
        message["content"] = Markup(message["content"])
    if message.get("tool_calls"):
        message["tool_calls"] = [_verbatim_call(call) for call in message["tool_calls"]]
    return message


def _verbatim_call(call: dict[str, Any]) -> dict[str, Any]:
    from markupsafe import Markup

    function = call.get("function") or {}
    if not isinstance(function.get("arguments"), str):
        return call
    return {**call, "function": {**function, "arguments": Markup(function["arguments"])}}


def chatml_function_calling(**kwargs: Any) -> Any:
    """llama-cpp-python's `chatml-function-calling` chat handler, given the messages verbatim (its arguments are the
    handler's: `llama`, `messages`, `tools`, ...)."""
    from llama_cpp.llama_chat_format import chatml_function_calling as handler

    kwargs["messages"] = [verbatim(message) for message in kwargs["messages"]]
    return handler(**kwargs)


def register() -> None:
    """Make `CHAT_FORMAT` a chat format of llama-cpp-python in this process (`--chat_format`)."""
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

    LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(CHAT_FORMAT, chatml_function_calling,
                                                                          overwrite=True)


def install_prompt_cache() -> None:
    """Make the server's RAM prompt cache (`--cache true --cache_type ram --cache_size N`) a `PromptCache` of N bytes
    in this process, keeping logits only when the model does (`--logits_all`)."""
    from llama_cpp.server.model import LlamaProxy

    from parley.core.llama_cache import PromptCache

    load = LlamaProxy.load_llama_from_model_settings
    if getattr(load, "parley_prompt_cache", False):
        return

    def load_with_prompt_cache(settings: Any) -> Any:
        llama = load(settings)
        if settings.cache and settings.cache_type == "ram":
            llama.set_cache(PromptCache(settings.cache_size, keep_logits=settings.logits_all))
        return llama

    load_with_prompt_cache.parley_prompt_cache = True
    LlamaProxy.load_llama_from_model_settings = staticmethod(load_with_prompt_cache)


def main() -> None:
    """Run llama-cpp-python's server (its command-line arguments) with `CHAT_FORMAT` registered and `PromptCache` as
    its RAM prompt cache."""
    register()
    install_prompt_cache()
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
