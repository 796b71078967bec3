"""Prompt tokens per answer, how much of them a seat's call repeats of its previous call, and the cost, per mode.

Each mode runs in-process against the scripted model server (tests/support/scripted_llm.py), which reports
`prompt_tokens_details.cached_tokens` as OpenAI does: the longest prefix a prompt shares with an earlier prompt to the
same model. The bench sets its minimum to 0 and its step to 1 token, so every repeated token counts (OpenAI caches
from 1,024 tokens in 128-token steps: that figure is computed too, by replaying the same prompts through the server's
`PromptCache` with OpenAI's settings). The scripted server counts a token per 4 characters.

Per mode it prints:
- calls and prompt tokens per answer (every call of the run: turns, stance extractions, judges, synthesis);
- per round, the prompt tokens of the seats' turns and the share of them that repeats the same seat's previous call
  (a seat: one debater, one agent at the table, one model of a multi-agent debate), computed from the prompts;
- the cached share the server reported over all calls (step 1, and OpenAI's 1,024/128);
- the run's cost with the model priced as `gpt-5-mini` of Parley's built-in table (USD 0.25 per million prompt
  tokens, 0.025 cached, 2.00 output): at list prices (nothing cached), and at cached prices with the cached tokens
  reported at step 1 and at OpenAI's settings.

Run from the repository root:  .venv/bin/python bench/cost.py [--rounds 5] [--table-rounds 3] [--mode duel ...]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.duel import script_duel  # noqa: E402
from tests.support.scripted_llm import PromptCache, ScriptedLLM, prefix_digests, prompt_tokens  # noqa: E402

PRICED_AS = "gpt-5-mini"
# The README's duel and round table.
DUEL_TOPIC = "Should remote work be the default?"
DUEL_USER = {"name": "Ada", "bio": "Engineer"}  # against tests/support/duel.py's opponent, turns and judges
TABLE_QUESTION = "Should we open a second office in Lyon?"
TABLE_AGENTS = [
    {"id": "claire", "name": "Claire", "role": "Finance", "persona": "", "memories": [], "documents": []},
    {"id": "marc", "name": "Marc", "role": "Sales", "persona": "", "memories": [], "documents": []},
]
MAD_QUESTION = "What is 17 * 23? Answer with the number."


@dataclass
class Call:
    body: dict
    cached: int  # what the server reported (step 1)
    tokens: int
    seat: str
    round: int | None


def seat_of(body: dict) -> str:
    """Which seat a call is: its model and the first line of its first message that says who it is ("You are ..."),
    or the first line of that message (a shared role)."""
    lines = str(next((m.get("content") or "" for m in body["messages"]), "")).splitlines() or [""]
    return f"{body.get('model')}|{next((line for line in lines if line.startswith('You ')), lines[0])}"


def round_of(body: dict) -> int | None:
    """The round a call asks for (the duel's "Round N of M", the round table's "This is [debate] round N"; the last
    of its prompt), None for calls that name none."""
    text = "\n".join(str(m.get("content") or "") for m in body["messages"])
    found = re.findall(r"\bRound (\d+) of \d+|\bThis is (?:debate )?round (\d+)", text)
    return int("".join(found[-1])) if found else None


def shared_tokens(a: dict, b: dict) -> int:
    """Tokens of the longest prefix two prompts share (at 1-token steps, as the server counts them)."""
    shared = 0
    for x, y in zip(prefix_digests(a, 1), prefix_digests(b, 1), strict=False):
        if x != y:
            break
        shared += 1
    return shared


def replay(bodies: list[dict], minimum: int, step: int) -> list[int]:
    cache = PromptCache(minimum, step)
    return [cache.lookup(body) for body in bodies]


def report(mode: str, llm: ScriptedLLM, output_tokens: int, turn_seat: str, first_round: int,
           by_index: bool = False) -> dict:
    """Print a mode's figures; return them. A call's round is the one its prompt names, or with `by_index` the number
    of calls its seat made before it."""
    from parley.llm.prices import BUILTIN_PRICES, price_of

    price = price_of(BUILTIN_PRICES[PRICED_AS])
    bodies, reported = llm.requests, llm.cached_tokens
    calls = [Call(b, c, prompt_tokens(b), seat_of(b), round_of(b)) for b, c in zip(bodies, reported, strict=True)]
    total = sum(c.tokens for c in calls)
    print(f"\n{mode}: {len(calls)} calls, {total} prompt tokens, {total / len(calls):.0f} per answer, "
          f"{output_tokens} output tokens")
    previous: dict[str, Call] = {}
    made: dict[str, int] = defaultdict(int)
    per_round: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for call in calls:
        if not re.search(turn_seat, call.seat):
            continue
        if by_index:
            call.round, made[call.seat] = made[call.seat], made[call.seat] + 1
        if call.round is None:
            continue
        if call.seat in previous:  # the seat's earlier call: what of it this one repeats
            row = per_round[call.round]
            row[0] += call.tokens
            row[1] += shared_tokens(previous[call.seat].body, call.body)
            row[2] += 1
        previous[call.seat] = call
    later, every = [0, 0], [0, 0]
    for number in sorted(per_round):
        tokens, shared, count = per_round[number]
        print(f"  round {number}: {count} turns, {tokens} prompt tokens, {shared / tokens:6.1%} repeat the seat's "
              f"previous call")
        every = [every[0] + tokens, every[1] + shared]
        if number >= first_round:
            later = [later[0] + tokens, later[1] + shared]
    share = later[1] / later[0] if later[0] else 0.0
    if every[0]:
        print(f"  every call after a seat's first: {every[1] / every[0]:.1%} repeat the seat's previous call")
    print(f"  rounds >= {first_round}: {share:.1%} of the turns' prompt tokens repeat the seat's previous call")
    openai_cached = replay(bodies, 1024, 128)
    step1 = sum(reported)
    print(f"  cached as the server reported (every call, any earlier prompt): {step1 / total:.1%} at 1-token steps, "
          f"{sum(openai_cached) / total:.1%} at OpenAI's 1,024-token minimum and 128-token steps")
    listed = price.cost(total, output_tokens)
    cached = price.cost(total, output_tokens, step1)
    cached_openai = price.cost(total, output_tokens, sum(openai_cached))
    print(f"  cost priced as {PRICED_AS}: list USD {listed:.6f}; cached USD {cached:.6f} "
          f"({1 - cached / listed:.1%} lower); at OpenAI's cache settings USD {cached_openai:.6f} "
          f"({1 - cached_openai / listed:.1%} lower)")
    return {"share": share, "list": listed, "cached": cached}


def factory_for(llm: ScriptedLLM):
    from parley.core.settings import Settings
    from parley.llm.factory import ModelFactory

    return ModelFactory(Settings(openai_base_url=llm.base_url, openai_api_key="sk-bench",
                                 openai_model="openai:scripted"))


def output_of(ctx) -> int:
    return ctx.ledger.total_tokens - ctx.ledger.input_tokens


async def duel(llm: ScriptedLLM, rounds: int) -> dict:
    from parley.graphs.duel import graph
    from parley.graphs.duel.steps import DuelContext

    script_duel(llm)  # fixed turns within the length bounds: the same calls before and after a prompt change
    ctx = DuelContext(models=factory_for(llm), rounds=rounds)
    await graph.ainvoke({"topic": DUEL_TOPIC, "user_profile": DUEL_USER}, context=ctx)
    return report(f"duel ({rounds} rounds)", llm, output_of(ctx), r"\|You are (?!an impartial)", 2)


async def roundtable(llm: ScriptedLLM, rounds: int, agents: list[dict] = TABLE_AGENTS,
                     question: str = TABLE_QUESTION, topic: str = TABLE_QUESTION) -> dict:
    from parley.graphs.roundtable import RoundTableContext, graph

    ctx = RoundTableContext(models=factory_for(llm), max_rounds=rounds, convergence_threshold=1.01)
    result = await graph.ainvoke({"question": question, "topic": topic, "agents": agents}, context=ctx)
    assert result["total_rounds"] == rounds, result["total_rounds"]
    return report(f"round table ({len(agents)} agents + devil's advocate, {rounds} debate rounds)", llm,
                  output_of(ctx), r"\|You are .*, seated at", 2)


async def roundtable5(llm: ScriptedLLM, rounds: int) -> dict:
    """bench/roundtable.py's table: five agents with personas, a question with numbers."""
    from bench.roundtable import QUESTION, TITLE, agents

    return await roundtable(llm, rounds, agents(), QUESTION, TITLE)


async def multiagent(llm: ScriptedLLM, rounds: int) -> dict:
    from parley.graphs.multiagent_debate import MultiAgentDebateContext, graph

    models = ["openai:agent-a", "openai:agent-b", "openai:agent-c"]
    ctx = MultiAgentDebateContext(models=factory_for(llm), agent_models=models, rounds=rounds)
    await graph.ainvoke({"question": MAD_QUESTION}, context=ctx)
    return report(f"multi-agent debate (3 agents, {rounds} revision rounds; the designer's fan_out asks the same)",
                  llm, output_of(ctx), r"^agent-", 2, by_index=True)


MODES = {"duel": duel, "roundtable": roundtable, "roundtable5": roundtable5, "multiagent": multiagent}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="duel rounds (the duel's default)")
    parser.add_argument("--table-rounds", type=int, default=3, help="round-table debate rounds after round 0")
    parser.add_argument("--revisions", type=int, default=2, help="multi-agent debate revision rounds")
    parser.add_argument("--mode", action="append", choices=sorted(MODES), help="one mode (repeat for more)")
    args = parser.parse_args()
    counts = {"duel": args.rounds, "roundtable": args.table_rounds, "roundtable5": args.table_rounds,
              "multiagent": args.revisions}
    print(f"cached tokens as the scripted server reports them at a 0-token minimum and 1-token steps; "
          f"priced as {PRICED_AS}")
    with ScriptedLLM(cache_min=0, cache_step=1) as llm:
        for mode in args.mode or list(MODES):
            llm.reset()
            await MODES[mode](llm, counts[mode])


if __name__ == "__main__":
    asyncio.run(main())
