"""The embedded model server's prompt cache (`PromptCache`), installed by `core.llama_server`: llama-cpp-python's RAM
cache, whose size is the bytes it really holds.

llama-cpp-python's own `LlamaRAMCache` counted a saved state as llama.cpp's part of it alone (`llama_state_size`, some
23 KB a token of SmolLM2-135M), while each `LlamaState` also held a copy of the model's logits for every token of its
prompt (`scores`, 192 KB a token: SmolLM2's 49,152-token vocabulary in float32). Its 512 MiB held some 4.5 GB: the
server grew ~75 MB with each distinct prompt of a debate (bench/embedded_memory.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

# What a state keeps of its logits when the model keeps none (`logits_all` off): `Llama.load_state` writes it over the
# rows of the prompt (`scores[:n_tokens] = state.scores`), rows nothing reads when `logits_all` is off.
NO_LOGITS = np.zeros((1, 1), dtype=np.single)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many tokens `a` and `b` share from their start."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


class PromptCache:
    """llama-cpp-python's RAM prompt cache (`LlamaRAMCache`'s interface: `Llama.set_cache`), whose size is the bytes it
    really holds: each state's llama.cpp data, its logits and its tokens, and its key. The least recently used states
    go first once they pass `capacity_bytes`; a prompt finds the kept state that shares its longest prefix.

    `keep_logits`: keep each state's logits (`LlamaState.scores`), as a model with `logits_all` on needs for the
    log-probabilities of a prompt's tokens (`echo`); a model with it off never writes them, and they are dropped."""

    def __init__(self, capacity_bytes: int, keep_logits: bool = False) -> None:
        self.capacity_bytes = capacity_bytes
        self.keep_logits = keep_logits
        self.cache_size = 0
        self._states: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()  # tokens (intc bytes): (LlamaState, size)

    @staticmethod
    def _key(tokens: Sequence[int]) -> bytes:
        return np.asarray(tokens, dtype=np.intc).tobytes()

    def _longest(self, tokens: Sequence[int]) -> bytes | None:
        tokens = np.asarray(tokens, dtype=np.intc)
        best, best_len = None, 0
        for key in self._states:
            length = common_prefix(np.frombuffer(key, dtype=np.intc), tokens)
            if length > best_len:
                best, best_len = key, length
        return best

    def __contains__(self, tokens: Sequence[int]) -> bool:
        return self._longest(tokens) is not None

    def __getitem__(self, tokens: Sequence[int]) -> Any:
        key = self._longest(tokens)
        if key is None:
            raise KeyError("no kept prompt shares a prefix with this one")
        self._states.move_to_end(key)
        return self._states[key][0]

    def __setitem__(self, tokens: Sequence[int], state: Any) -> None:
        if not self.keep_logits:
            state.scores = NO_LOGITS
        key = self._key(tokens)
        size = len(key) + len(state.llama_state) + state.scores.nbytes + state.input_ids.nbytes
        if key in self._states:
            self.cache_size -= self._states.pop(key)[1]
        self._states[key] = (state, size)
        self.cache_size += size
        while self.cache_size > self.capacity_bytes and self._states:
            self.cache_size -= self._states.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._states)

    def __bool__(self) -> bool:  # `Llama` asks `if self.cache:`: an empty cache is still one
        return True
