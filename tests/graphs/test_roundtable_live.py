"""A round table on the real embedded model (SmolLM2-135M on llama.cpp): three seats, two debate rounds, end to end.

The embedded server answers one call at a time while a round sends every seat at once: the model layer queues the
calls beyond it (`llm.endpoints`), each given its read timeout from its sending, and each wait is a `queued` event.
Structure only (a tiny model's words are not asserted), and the answers kept short so the table fits in CI's time on
two cores: greedy turns of at most `TURN_TOKENS` tokens.
"""

from __future__ import annotations

import pytest

from parley.graphs.roundtable import graph
from parley.graphs.roundtable.steps import RoundTableContext
from parley.llm.endpoints import QUEUE_WATCH
from parley.llm.factory import ModelFactory
from parley.nodes.events import report_queued

pytestmark = pytest.mark.live

TURN_TOKENS = 48
AGENTS = [
    {"id": "claire", "name": "Claire", "role": "Finance", "persona": "Claire watches costs and cash flow.",
     "isDevilsAdvocate": False, "memories": [], "documents": []},
    {"id": "marc", "name": "Marc", "role": "Sales", "persona": "Marc wants new customers in new regions.",
     "isDevilsAdvocate": False, "memories": [], "documents": []},
]


async def test_a_three_seat_two_round_table_on_the_embedded_model(parley_env, embedded_model):
    # Two agents and the built-in devil's advocate; a threshold no score reaches, so both debate rounds are run.
    context = RoundTableContext(models=ModelFactory(parley_env, local_base_url=embedded_model.url),
                                model="local:smollm2", max_rounds=2, convergence_threshold=1.01,
                                max_tokens=TURN_TOKENS, answer_words=30, temperature=0.0)
    events, result = [], {}
    watch = QUEUE_WATCH.set(report_queued)  # as the run engine does: a call waiting for the model is an event
    try:
        async for mode, part in graph.astream({"question": "Should we open a second office in Lyon?",
                                               "agents": AGENTS}, context=context,
                                              stream_mode=["custom", "values"]):
            if mode == "custom":
                events.append(dict(part))
            else:
                result = part
    finally:
        QUEUE_WATCH.reset(watch)

    assert result["total_rounds"] == 2
    assert [r["roundNumber"] for r in result["rounds"]] == [0, 1, 2]
    assert sorted((m["roundNumber"], m["agentName"]) for m in result["transcript"]) == sorted(
        (r, name) for r in (0, 1, 2) for name in ("Claire", "Marc", "Devil's Advocate"))
    assert all(m["content"].strip() and m["stance"] in ("for", "against", "conditional", "neutral")
               for m in result["transcript"])
    synthesis = result["synthesis"]
    assert synthesis["roundCount"] == 2 and synthesis["recommendedAction"].strip()
    assert sorted(i["name"] for i in synthesis["agentInsights"]) == ["Claire", "Devil's Advocate", "Marc"]
    # The seats of a round waited in line for the one-call-at-a-time server, and said so.
    queued = [e for e in events if e.get("event") == "queued"]
    assert queued and all(e["model"] == "local:smollm2" and e["position"] >= 1 for e in queued)
    # The model read the prompts as written, so it wrote no HTML entities back (`business&#39;s`).
    texts = [m["content"] for m in result["transcript"]] + [str(value) for value in synthesis.values()]
    assert not [text for text in texts if "&#" in text]
