"""The `judge` node: a verdict on a two-sided debate, asked twice with the speakers' order swapped; and the same
judge for N answers to one request (`judge_answers`, the panel's `best-of-n` rule), asked twice with the
answers' order reversed.

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
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Literal, NotRequired

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel, Field, create_model
from typing_extensions import TypedDict  # pydantic's schemas need these before Python 3.12

from parley.llm.failures import classify_failure, describe_failure
from parley.nodes.anonymise import Anonymiser
from parley.nodes.arbitrate import ANSWER_LETTERS, arbitration_messages
from parley.nodes.bounds import AtMost, Clipped
from parley.nodes.capability import mark
from parley.nodes.context import RunContext
from parley.nodes.events import emit
from parley.nodes.fan_out import FanOut
from parley.nodes.prompts import decide as decide_prompts
from parley.nodes.structured import ask_structured, node_attempt, structured_retry
from parley.nodes.text import clip, topic_language

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
                      fan_out: FanOut = JUDGES) -> list[Send]:
    """Send the transcript (the state's `keys`) to the judge twice: as debated, and with the order swapped."""
    shared = {key: state.get(key) for key in keys}
    return fan_out.send([{**shared, "swapped": False}, {**shared, "swapped": True}])


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
    """Build a judge node for a two-sided debate: one verdict on its anonymised transcript, in the order asked.

    The node reads a `JudgeInput` (the topic, both profiles, the `user` and `opponent` turns, and `swapped`), shows
    the judge the speakers as Speaker A and B, and writes one verdict (`order`, `winner` "user" | "opponent" |
    "tie", `winnerReason`, `consensus`, `disagreements`, `conclusion`, `recommendations`, the names put back) to
    `output_key`. Send it twice with `judge_both_orders` and combine the two with `agreed_winner`. A verdict still
    unreadable on the last attempt counts as an abstention (a tie), rather than failing the run.

    Args:
        system, prompt: the judge's templates; `system` takes `{language}`, `prompt` takes `{topic}`,
            `{turns}`, `{transcript}` and `{conclusion_max_chars}`.
        unreadable: the reason given for an abstention (a verdict unreadable on the last attempt).
        context: the run context class the node reads; `model_role`, `temperature_role` and
            `conclusion_role` name its fields giving the judge's model, temperature and conclusion length.
        attempts: the node's attempts (its retry policy's `max_attempts`, see `JUDGE_RETRY`).
        output_key: where the verdict goes (a list with `operator.add`, one verdict per judging).
        label: the usage label of its calls.

    Returns:
        The async node `(state, runtime) -> update`, named `judge`.

    Example:
        ```python
        # The duel's judge (parley.graphs.duel), which reads its model and knobs from a DuelContext.
        judge_debate = parley.judge(system=prompts.JUDGE_SYSTEM, prompt=prompts.JUDGE_PROMPT,
                                    unreadable=prompts.UNREADABLE_VERDICT, context=parley.DuelContext)
        builder.add_node("judge", judge_debate, retry_policy=JUDGE_RETRY)
        builder.add_conditional_edges("announce_synthesis", judge_both_orders, ["judge"])
        ```
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
    """The verdict as debated and the swapped one (the first twice when there is one only).

    Raises:
        IndexError: `verdicts` is empty (a judging always records one verdict, an abstention included).
    """
    ordered = sorted(verdicts, key=lambda v: v.get("order") != "as_debated")
    return ordered[0], ordered[1] if len(ordered) > 1 else ordered[0]


def agreed_winner(first: str, second: str) -> str:
    """The winner both judgings named, else "tie": the rule that turns two verdicts into one."""
    return first if first == second else "tie"


# --- N answers ------------------------------------------------------------------------------

# A judge picking the best of several answers reads them at this temperature: a verdict, not a composition.
PICK_TEMPERATURE = 0.0


class AnswersToJudge(TypedDict):
    """What one judging of several answers receives through `Send`: the conversation they answer, the answers
    (`{model, model_id?, answer}`, in panel order), and whether to read them reversed."""

    messages: list[dict]
    answers: list[dict]
    system_prompt: NotRequired[str | None]
    criteria: NotRequired[str | None]  # what the caller wants the answers weighed by
    swapped: bool


@cache
def pick_schema(letters: str) -> type[BaseModel]:
    """The judge's answer when the answers are shown as `letters` (one class per set, so a model call's schema is
    built once): the best one's letter, and why."""
    return create_model(
        "Pick",
        __doc__="The judge's choice of the best answer.",
        best=(Literal[tuple(letters)], Field(description="The letter of the best answer.")),
        reason=(Clipped(300), Field(description="One or two sentences on why it is the best, naming its letter.")),
    )


def reading_order(count: int, swapped: bool) -> list[int]:
    """The answers' positions in the order a judging reads them: as given, or reversed (so the first is last).

    Reversing generalises the duel's swap to N answers: every answer read first in one order is read last in the
    other, which exposes a judge that favours a position.
    """
    return list(range(count))[::-1] if swapped else list(range(count))


def judge_answers(
    *,
    candidates: Callable[[dict, RunContext], Sequence[str]],
    context: type[RunContext] = RunContext,
    temperature: float | None = PICK_TEMPERATURE,
    attempts: int = JUDGE_ATTEMPTS,
    output_key: str = "verdicts",
    label: str = "judge",
):
    """Build a judge node for N answers to one request: one judging picking the best, in the order asked.

    The answers are shown as the arbitrator sees them (Answer A, B, C in reading order, their authors' model names
    redacted, cut to fit the judge's window); the judge names the best one's letter. A judging still unreadable on
    the last attempt abstains (`pick` None). Send it twice with `judge_both_orders(state, keys=("messages",
    "answers", "system_prompt"))`; two judgings that pick the same answer agree (`agreed_winner`).

    Args:
        candidates: the judge's model, the first of this chain (from the state and the run's context).
        context: the run context class the node reads.
        temperature: the judge's sampling temperature.
        attempts: the node's attempts (its retry policy's `max_attempts`, see `JUDGE_RETRY`).
        output_key: where the verdict goes (a list with `operator.add`): `{order, swapped, judge, pick, panelist,
            reason}`, `pick` being the chosen answer's position in `answers`.
        label: the usage label of its calls.

    Returns:
        The async node `(state, runtime) -> update`, named `judge`; it sends a `verdict` event too.

    Example:
        ```python
        # docs/python.md, custom_debate.py: the run's model judges state["answers"] as given and reversed
        builder.add_node("judge", parley.judge_answers(candidates=lambda state, ctx: [ctx.model_id()]))
        builder.add_conditional_edges("line_up", lambda state: judge_both_orders(state, keys=("messages", "answers")),
                                      ["judge"])
        ```
    """

    async def judge_best(state: AnswersToJudge, runtime: Runtime) -> dict:
        """Pick the best of the anonymised answers, reading them in the order the input asks for."""
        ctx = context.of(runtime)
        answers, swapped = state["answers"], state["swapped"]
        order = reading_order(len(answers), swapped)
        shown = [answers[i] for i in order]
        letters = ANSWER_LETTERS[: len(shown)]
        model = list(candidates(state, ctx))[0]
        prompt = arbitration_messages(
            state["messages"], shown, system_prompt=state.get("system_prompt"),
            instructions=decide_prompts.PICK_SYSTEM, request=decide_prompts.PICK_REQUEST,
            prompt_budget=ctx.factory.prompt_budget(model, None), criteria=state.get("criteria"),
        )
        structured = ctx.structured(pick_schema(letters), model, temperature=temperature, label=label)

        def abstain(exc: BaseException) -> None:
            log.warning("judge of %d answers (%s order) unreadable (%s); it abstains", len(answers),
                        "reversed" if swapped else "given", exc.__class__.__name__)

        verdict = await ask_structured(structured, prompt, fallback=abstain,
                                       attempt=node_attempt(runtime, default=attempts), attempts=attempts)
        pick = None if verdict is None else order[letters.index(verdict.best)]
        names = Anonymiser({a["model"]: f"Answer {letters[i]}" for i, a in enumerate(shown)}, min_length=0)
        record = {
            "order": "reversed" if swapped else "as_given", "swapped": swapped, "judge": ctx.model_id(model),
            "pick": pick, "panelist": None if pick is None else answers[pick]["model"],
            "reason": "" if verdict is None else names.reveal(verdict.reason),
        }
        emit({"event": "verdict", **record})
        return {output_key: [record]}

    judge_best.__name__ = "judge"
    return mark(judge_best, "judge")


def abstention(task: dict, exc: BaseException) -> dict[str, Any]:
    """The verdict recorded for a judging of N answers whose model call failed (its retries spent): it abstains."""
    return {"order": "reversed" if task.get("swapped") else "as_given", "swapped": bool(task.get("swapped")),
            "judge": None, "pick": None, "panelist": None, "reason": "", "error": classify_failure(exc),
            "detail": describe_failure(exc)}
