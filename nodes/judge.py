"""The `judge` node: a verdict on a two-sided debate, asked twice with the speakers' order swapped.

    judge_debate = judge(system=prompts.JUDGE_SYSTEM, prompt=prompts.JUDGE_PROMPT,
                         unreadable=prompts.UNREADABLE_VERDICT, context=DuelContext)
    builder.add_node("judge", judge_debate, retry_policy=JUDGE_RETRY)
    builder.add_conditional_edges("announce_synthesis", judge_both_orders, ["judge"])

The judge reads the debate anonymised: speakers become "Speaker A" (who opens every round in the
order asked) and "Speaker B", and their names are put back in its verdict. Judging both orders is what
exposes a judge that favours whoever spoke first; the two verdicts land in `verdicts`. A verdict still
unreadable on the last attempt counts as an abstention (a tie), rather than failing the run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic's schemas need these before Python 3.12

from nodes.anonymise import Anonymiser
from nodes.bounds import AtMost, Clipped
from nodes.capability import mark
from nodes.context import RunContext
from nodes.fan_out import FanOut
from nodes.structured import ask_structured, node_attempt, structured_retry
from nodes.text import clip, topic_language

log = logging.getLogger("parley.judge")

Role = Literal["user", "opponent"]

# How many times a judge is asked for a readable verdict before it counts as abstaining.
JUDGE_ATTEMPTS = 2

# The judge node's retry policy: transient failures and unreadable verdicts get one more try.
JUDGE_RETRY = structured_retry(JUDGE_ATTEMPTS)


class Judgement(BaseModel):
    """One judge's verdict on an anonymised transcript."""

    consensus: AtMost(4, Clipped(120)) = Field(description="Points both speakers agreed on (may be empty).")
    disagreements: AtMost(4, Clipped(120)) = Field(description="The core points the speakers disagreed on.")
    winner: Literal["A", "B", "tie"] = Field(description="Who argued better: 'A', 'B', or 'tie' if evenly matched.")
    winnerReason: Clipped(300) = Field(description="One or two sentences explaining the winner, naming Speaker A or B.")
    # Not bounded here: the node cuts it at a sentence boundary, which a plain cut would not respect.
    conclusion: str = Field(description="The overall conclusion about the topic, at most 100 characters.")
    recommendations: AtMost(3, Clipped(120)) = Field(description="Two or three practical recommendations for readers.")


class JudgeInput(TypedDict):
    """What one judging receives through `Send`: the debate, and which order to read it in."""

    topic: str
    user_profile: dict
    opponent_profile: dict
    messages: list[dict]
    swapped: bool


# The two judgings of one debate, at once; both are needed.
JUDGES = FanOut(node="judge", results_key="verdicts")


def judge_both_orders(state: dict, *, keys: Sequence[str] = ("topic", "user_profile", "opponent_profile", "messages"),
                      ) -> list[Send]:
    """Send the transcript to the judge twice: as debated, and with the speakers' order swapped."""
    shared = {key: state[key] for key in keys}
    return JUDGES.send([{**shared, "swapped": False}, {**shared, "swapped": True}])


mark(judge_both_orders, "fan_out")  # a router on `FanOut`


def anonymised_transcript(messages: list[dict], first: Role, names: dict[Role, str]) -> str:
    """The debate with speakers labelled A (`first`, who opens every round) and B, their names hidden."""
    label = {first: "Speaker A", ("opponent" if first == "user" else "user"): "Speaker B"}
    hide = Anonymiser({names[role]: label[role] for role in label})
    lines = []
    for start in range(0, len(messages), 2):
        pair = sorted(messages[start:start + 2], key=lambda m: m["role"] != first)
        lines += [f"{label[m['role']]}: {hide.hide(m['content'])}" for m in pair]
    return "\n".join(lines)


def judge(
    *,
    system: str,
    prompt: str,
    unreadable: str,
    context: type[RunContext] = RunContext,
    model_role: str = "judge_model",
    temperature_role: str = "synthesis_temperature",
    conclusion_role: str = "conclusion_max_chars",
    attempts: int = JUDGE_ATTEMPTS,
    output_key: str = "verdicts",
    label: str = "judge",
):
    """Build a judge node: one verdict on the anonymised debate of a `JudgeInput`, in the order it asks for.

    Args:
        system, prompt: the judge's templates; `system` takes `{language}`, `prompt` takes `{topic}`,
            `{turns}`, `{transcript}` and `{conclusion_max_chars}`.
        unreadable: the reason given for an abstention (a verdict unreadable on the last attempt).
        context: the run context class the node reads; `model_role`, `temperature_role` and
            `conclusion_role` name its fields giving the judge's model, temperature and conclusion length.
        attempts: the node's attempts (its retry policy's `max_attempts`, see `JUDGE_RETRY`).
        output_key: where the verdict goes (a list with `operator.add`, one verdict per judging).
    """

    async def judge_debate(state: JudgeInput, runtime: Runtime) -> dict:
        """Judge the anonymised debate once, in the order the input asks for."""
        ctx = context.of(runtime)
        conclusion_chars = getattr(ctx, conclusion_role)
        first: Role = "opponent" if state["swapped"] else "user"
        second: Role = "user" if state["swapped"] else "opponent"
        names: dict[Role, str] = {"user": state["user_profile"]["name"], "opponent": state["opponent_profile"]["name"]}
        language = topic_language(state["topic"])
        messages = [
            SystemMessage(system.format(language=language)),
            HumanMessage(prompt.format(
                topic=state["topic"], turns=len(state["messages"]),
                transcript=anonymised_transcript(state["messages"], first, names),
                conclusion_max_chars=conclusion_chars,
            )),
        ]
        model = ctx.structured(Judgement, getattr(ctx, model_role), temperature=getattr(ctx, temperature_role),
                               label=label)

        def abstain(exc: BaseException) -> Judgement:
            # Still unreadable: an abstention, which with the other judge's verdict makes the result a tie.
            log.warning("judge (%s order) unreadable (%s); counted as a tie",
                        "swapped" if state["swapped"] else "debated", exc.__class__.__name__)
            return Judgement(consensus=[], disagreements=[], winner="tie", recommendations=[],
                             winnerReason=unreadable, conclusion="")

        verdict: Judgement = await ask_structured(
            model, messages, fallback=abstain, attempt=node_attempt(runtime, default=attempts), attempts=attempts,
        )
        reveal = Anonymiser({names[first]: "Speaker A", names[second]: "Speaker B"}, min_length=0).reveal
        return {output_key: [{
            "order": "swapped" if state["swapped"] else "as_debated",
            "speakerA": first,
            "speakerB": second,
            "winner": {"A": first, "B": second, "tie": "tie"}[verdict.winner],
            "winnerReason": reveal(verdict.winnerReason),
            "consensus": [reveal(item) for item in verdict.consensus],
            "disagreements": [reveal(item) for item in verdict.disagreements],
            "conclusion": clip(reveal(verdict.conclusion), conclusion_chars),
            "recommendations": [reveal(item) for item in verdict.recommendations],
        }]}

    judge_debate.__name__ = "judge"
    return mark(judge_debate, "judge")


def verdicts_by_order(verdicts: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The verdict as debated and the swapped one (the first twice when there is one only)."""
    ordered = sorted(verdicts, key=lambda v: v.get("order") != "as_debated")
    return ordered[0], ordered[1] if len(ordered) > 1 else ordered[0]


def agreed_winner(first: str, second: str) -> str:
    """The winner both judgings named, else "tie": the rule that turns two verdicts into one."""
    return first if first == second else "tie"
