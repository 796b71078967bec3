"""The panel's decision rules: how a debate's answers become one answer (the state's `rule`).

- `synthesis` (the default): the arbitrator writes the best answer from all of them (`nodes.arbitrate`).
- `vote`: every answer is read by an answer rule (`nodes.answers`; the state's `answer_rule`, `exact` by default,
  whose format the panelists are asked for) and the majority's first answer comes back verbatim with the tally.
  A tie, or no answer given twice, goes to the arbitrator.
- `rank`: every panelist ranks the others' anonymised answers, never its own, each reading them in its own order,
  shuffled by the state's `seed` (`nodes.rank`); the Borda count's winner comes back verbatim with the ranking.
  A tie, or fewer than three answers, goes to the arbitrator.
- `best-of-n`: a judge picks the best answer twice, reading them in panel order and reversed (`nodes.judge`);
  when both readings pick the same one it comes back verbatim, else (a position bias) the arbitrator decides.
- `analysis`: no one decides; the answer is the panelists' answers, labelled, for a caller whose own model writes
  the final answer from them and from their map (`analysis`, which every rule's debate gets: `nodes.analysis`).

When every arbitrator candidate fails, a debate with two answers or more degrades to its labelled answers
(`degrade`: `degraded` says so, `failures` who failed) instead of failing; an answer that must be JSON or a tool
call cannot, and fails as before.

The arbitrator and the judge are the request's candidates, those of a family not on the panel first
(`llm.families.independent_first`, in `steps._arbitrators`). Every rule writes `decision` (a chat completion's
`_meta.decision`) and sends it as a `decision` event; reviews and verdicts go out as `review` and `verdict` events.

    tally -> decide -> arbitrate -> END
                     | assemble_panel -> END (analysis)
                     | vote -> END | arbitrate
                     | review x N (Send) -> count_ranks -> END | arbitrate
                     | judge x 2 (Send) -> pick_best -> END | arbitrate
"""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any, Literal

from langgraph.graph import END
from langgraph.runtime import Runtime
from langgraph.types import Send

from parley.llm.failures import is_model_failure
from parley.llm.families import model_family
from parley.llm.formats import AnswerFormat
from parley.llm.tools import ToolSet
from parley.nodes.answers import AnswerRule, majority_answer, parse_rule
from parley.nodes.arbitrate import content_text
from parley.nodes.events import emit, event_writer
from parley.nodes.fan_out import FanOut
from parley.nodes.judge import abstention, agreed_winner, judge_answers, judge_both_orders
from parley.nodes.prompts import decide as prompts
from parley.nodes.rank import ReviewTask, borda, public_review, rank, review_failure, review_orders
from parley.nodes.speak import chunk_event

from parley.graphs.panel.steps import (
    AllModelsFailedError,
    PanelContext,
    _arbitrators,
    arbitrate_panel,
    candidate_failures,
    labelled_answers,
    panel_context,
    settle_shadow,
)

__all__ = [
    "DEFAULT_ANSWER_RULE", "DEFAULT_RULE", "JUDGES", "MIN_RANK_ANSWERS", "REVIEWS", "RULES", "RuleError",
    "arbitrate_by_rule", "check_rule", "chosen_text", "count_ranks", "decide", "judge_answer", "panelist_instructions",
    "pick_best", "review_answers", "vote",
]

log = logging.getLogger("parley.panel")

RULES = ("synthesis", "vote", "rank", "best-of-n", "analysis")
DEFAULT_RULE = "synthesis"
DEFAULT_ANSWER_RULE = "exact"
# Each panelist ranks the others' answers: with two answers each reviewer would read one, which ranks nothing.
MIN_RANK_ANSWERS = 3
# A vote is won by an answer given at least this often, and more often than any other.
MIN_VOTES = 2
# Answers a debate needs to answer with them, labelled, when every arbitrator fails.
MIN_DEGRADED_ANSWERS = 2

NOT_INDEPENDENT = ("No configured {role} candidate is of a family outside the panel's ({families}), so {model} "
                   "decided; judges favour their own family's answers. Configure one (the router's `arbitrator`, "
                   "PARLEY_ARBITRATOR_MODEL) to avoid it.")


class RuleError(ValueError):
    """A decision rule (or its answer rule) that cannot be used; `param` names the field at fault."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def check_rule(rule: str | None, answer_rule: str | None = None, panel_size: int | None = None) -> None:
    """Refuse a rule that is not one of `RULES`, an answer rule `nodes.answers.parse_rule` cannot read, an answer
    rule without `vote`, and `rank` on a panel of fewer than `MIN_RANK_ANSWERS` seats (`RuleError`)."""
    if rule is not None and rule not in RULES:
        raise RuleError("rule", f"rule must be one of {', '.join(RULES)}, not {rule!r}")
    if answer_rule is not None:
        if (rule or DEFAULT_RULE) != "vote":
            raise RuleError("answer_rule", f"an answer rule ('{answer_rule}') reads the answers of a vote: "
                                           f"it needs rule 'vote', not '{rule or DEFAULT_RULE}'")
        try:
            parse_rule(answer_rule)
        except ValueError as exc:
            raise RuleError("answer_rule", str(exc)) from None
    if rule == "rank" and panel_size is not None and panel_size < MIN_RANK_ANSWERS:
        raise RuleError("rule", f"rule 'rank' needs a panel of at least {MIN_RANK_ANSWERS} (each panelist ranks "
                                f"the others' answers), not {panel_size}")


def rule_of(state: dict[str, Any]) -> str:
    rule = state.get("rule") or DEFAULT_RULE
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, not {rule!r}")
    return rule


def answer_rule_of(state: dict[str, Any]) -> AnswerRule:
    return parse_rule(state.get("answer_rule") or DEFAULT_ANSWER_RULE)


def seed_of(state: dict[str, Any]) -> int:
    """The seed of the reviewers' orders: the state's, else one drawn from the conversation (the same question
    is read in the same orders)."""
    if state.get("seed") is not None:
        return int(state["seed"])
    return zlib.crc32(json.dumps(state["messages"], sort_keys=True, default=str).encode())


def panelist_instructions(state: dict[str, Any]) -> str | None:
    """The system prompt each panelist is sent: the caller's, and under `vote` the answer rule's format line, so
    that every answer can be read back (left out when the conversation asks for that format already)."""
    system = state.get("system_prompt")
    if state.get("mode", "debate") != "debate" or rule_of(state) != "vote":
        return system
    instruction = answer_rule_of(state).instruction
    if any(instruction in content_text(m.get("content")) for m in state["messages"]):
        return system
    return f"{system}\n\n{instruction}" if system else instruction


# --- how the decision is told ---------------------------------------------------------------


def independence(state: dict[str, Any], model: str, role: str) -> dict[str, Any]:
    """Whether `model` (an arbitrator or judge) is of a family none of the panelists is; with a note when not."""
    families = sorted({model_family(seat["model"]) for seat in state.get("chosen") or []})
    if model_family(model) not in families:
        return {"independent": True}
    return {"independent": False,
            "note": NOT_INDEPENDENT.format(role=role, families=", ".join(families), model=model)}


def chosen(state: dict[str, Any], decision: dict[str, Any], index: int, note: str) -> dict[str, Any]:
    """Answer with the answer at `index` verbatim, ending with `note`; announce the decision and stream it.

    A request that offers tools the answer may call, or asks for JSON, gets the rule's choice only as JSON that
    conforms, verbatim without the note (the tally and ranking are in the decision); else the arbitrator, who is
    given the tools and held to the format, answers.
    """
    winner = state["answers"][index]
    tools, answer_format = ToolSet.load(state.get("tools")), AnswerFormat.load(state.get("response_format"))
    if tools is not None and tools.may_call:
        return undecided({**decision, "winner": winner["model"]},
                         "the answer may call the request's tools, which only the arbitrator is given")
    if answer_format is not None and (problem := answer_format.problem(winner["answer"])) is not None:
        return undecided({**decision, "winner": winner["model"]},
                         f"the chosen answer is not the JSON the request asks for ({problem})")
    model = winner.get("model_id") or winner["model"]
    decision = {**decision, "winner": winner["model"], "model": model}
    emit({"event": "decision", **decision})
    text = winner["answer"] if answer_format is not None else winner["answer"] + prompts.NOTE_SEPARATOR + note
    event_writer()(chunk_event({"id": model, "name": winner["model"]}, text))
    return settle_shadow(state, {"answer": text, "decision": decision, "arbitrator": None})


def undecided(decision: dict[str, Any], reason: str) -> dict[str, Any]:
    """Leave the answer to the arbitrator, saying why."""
    decision = {**decision, "decidedBy": "arbitrator", "reason": reason}
    emit({"event": "decision", **decision})
    return {"decision": decision}


def chosen_text(answer: str, decision: dict[str, Any] | None) -> str:
    """A debate's answer without the note its rule added: the chosen answer as its panelist wrote it (the
    arbitrator's answer, which has no note, as it is)."""
    if not decision or decision.get("decidedBy") == "arbitrator":
        return answer
    return answer.rsplit(prompts.NOTE_SEPARATOR, 1)[0]


def after_decision(state: dict[str, Any]) -> Literal["arbitrate", "__end__"]:
    """The end when the rule chose an answer, else the arbitrator."""
    return "arbitrate" if state["decision"]["decidedBy"] == "arbitrator" else END


async def arbitrate_by_rule(state: dict[str, Any], runtime: Runtime[PanelContext]) -> dict[str, Any]:
    """Have the arbitrator write the answer: the rule's own way (`synthesis`), or the decider of a rule's tie.

    When every arbitrator candidate fails and at least two panelists answered, the answer degrades to their labelled
    answers (`degrade`) rather than failing, unless it had to be JSON or a tool call, which labelled answers are not.
    """
    try:
        out = await arbitrate_panel(state, runtime)
    except AllModelsFailedError as exc:
        if reason := undegradable(state, exc, streamed=panel_context(runtime).streamed):
            log.warning("every arbitrator failed and the answer cannot degrade: %s", reason)
            raise
        return degrade(state, exc)
    decision = state.get("decision") or {"rule": rule_of(state), "decidedBy": "arbitrator"}
    decision = {**decision, "model": out["arbitrator"], "arbitrator": out["arbitrator"],
                **independence(state, out["arbitrator"], "arbitrator")}
    emit({"event": "decision", **decision})
    return settle_shadow(state, {**out, "decision": decision})


def undegradable(state: dict[str, Any], exc: AllModelsFailedError, *, streamed: bool = False) -> str | None:
    """Why a debate whose arbitrators all failed cannot answer with its labelled answers (None when it can): too few
    answers, an answer that must be JSON or a tool call, or (`streamed`) part of an arbitrator's answer already read
    by the client, who cannot be given another one after it."""
    if streamed and any(attempt.get("partial") for attempt in exc.attempts):
        return "part of an arbitrator's answer was already streamed"
    if len(state.get("answers") or []) < MIN_DEGRADED_ANSWERS:
        return f"fewer than {MIN_DEGRADED_ANSWERS} panelists answered"
    if AnswerFormat.load(state.get("response_format")) is not None:
        return "the answer must be JSON"
    tools = ToolSet.load(state.get("tools"))
    if tools is not None and tools.must_call:
        return "the answer must call a tool"
    return None


def degrade(state: dict[str, Any], exc: AllModelsFailedError) -> dict[str, Any]:
    """The answer when no arbitrator could write one: the panelists' answers, labelled, with the map the tally made,
    the decision saying why no one decided, and each failed candidate in `failures`."""
    decision = {**(state.get("decision") or {"rule": rule_of(state)}), "decidedBy": "none", "model": "panel",
                "reason": f"every {exc.role} candidate failed, so the panelists' answers come back labelled"}
    emit({"event": "decision", **decision})
    update = {"answer": labelled_answers(state["answers"]), "arbitrator": None, "decision": decision,
              "degraded": f"{exc.role}_failed", "attempts": list(exc.attempts),
              "failures": [*(state.get("failures") or []), *candidate_failures(exc.attempts)]}
    return settle_shadow(state, update)


arbitrate_by_rule.__wrapped__ = arbitrate_panel  # type: ignore[attr-defined]  # the `arbitrate` capability


# --- the routing after the tally ------------------------------------------------------------


def decide(
    state: dict[str, Any],
) -> list[Send] | Literal["arbitrate", "vote", "count_ranks", "assemble_panel", "agree"]:
    """Take the debate's answers to its rule: the arbitrator, the vote, the reviewers, the judges, or (`analysis`)
    no one: the labelled answers and their map. Under adaptive depth, two first seats that agreed answer (`agree`)
    whatever the rule but `vote` and `analysis`."""
    rule = rule_of(state)
    if rule == "analysis":
        return "assemble_panel"
    if rule == "vote":
        return "vote"
    if stopped_early(state):
        return "agree"
    if rule == "rank":
        return ask_reviewers(state) if len(state["answers"]) >= MIN_RANK_ANSWERS else "count_ranks"
    if rule == "best-of-n":
        return judge_both_orders(
            state, keys=("messages", "answers", "system_prompt", "arbitrators", "chosen", "criteria"), fan_out=JUDGES)
    return "arbitrate"


# --- adaptive depth's early stop -----------------------------------------------------------


def stopped_early(state: dict[str, Any]) -> bool:
    """Whether adaptive depth stopped at its first seats because they agreed (a shadow asks the rest anyway)."""
    report = state.get("adaptive") or {}
    return report.get("path") == "agreed" and "shadow" not in report


async def agree(state: dict[str, Any]) -> dict[str, Any]:
    """The answer when adaptive depth's first two seats agreed: the first's, as written, with a note saying so (the
    consensus check of HCP-MAD: an agreed pair of distinct families settles the question, and no one else is
    asked). A `vote` counts its two ballots instead; an answer that may call tools, or must be JSON the first answer
    is not, goes to the arbitrator (`chosen`)."""
    report, answers = state["adaptive"], state["answers"]
    note = prompts.AGREED_NOTE.format(first=answers[0]["model"], second=answers[1]["model"],
                                      agreement=report["agreement"], threshold=report["threshold"])
    decision = {"rule": rule_of(state), "decidedBy": "agreement", "agreement": report["agreement"]}
    return chosen(state, decision, 0, note)


# --- vote -----------------------------------------------------------------------------------


async def vote(state: dict[str, Any]) -> dict[str, Any]:
    """Read every answer by the answer rule and return the majority's first verbatim, with the tally."""
    rule = answer_rule_of(state)
    answers = state["answers"]
    ballot = majority_answer([a["answer"] for a in answers], rule)
    unreadable = [a["model"] for a, read in zip(answers, ballot.votes) if read is None]
    tally = [{"answer": answer, "votes": len(where), "panelists": [answers[i]["model"] for i in where]}
             for answer, where in ballot.tally()]
    decision = {"rule": "vote", "answerRule": rule.name, "tally": tally, "unreadable": unreadable}
    if ballot.vote.answer is None:
        return undecided(decision, f"no answer could be read as `{rule.name}`")
    if ballot.vote.tied:
        leaders = " and ".join(f"{t['answer']!r}" for t in tally if t["votes"] == ballot.vote.count)
        return undecided(decision, f"the vote is tied: {leaders} have {ballot.vote.count} each")
    if ballot.vote.count < MIN_VOTES:
        return undecided(decision, "no answer was given by two panelists")
    items = [prompts.VOTE_ITEM.format(answer=t["answer"], count=t["votes"], panelists=", ".join(t["panelists"]))
             for t in tally]
    if unreadable:
        items.append(prompts.VOTE_UNREADABLE.format(count=len(unreadable), panelists=", ".join(unreadable)))
    note = prompts.VOTE_NOTE.format(rule=rule.name, tally="; ".join(items))
    return chosen(state, {**decision, "decidedBy": "majority", "answer": ballot.vote.answer}, ballot.winner_index,
                  note)


# --- rank -----------------------------------------------------------------------------------


# One reviewer per answer; a reviewer whose model fails (its retries spent) abstains rather than sink the others.
REVIEWS = FanOut(node="review", results_key="reviews", tolerate=is_model_failure, failure=review_failure)

review_answers = rank(context=PanelContext)


def review_tasks(state: dict[str, Any]) -> list[ReviewTask]:
    """Every panelist that answered, reviewing the others' answers in its own seeded order."""
    answers = state["answers"]
    orders = review_orders(len(answers), seed_of(state))
    return [
        ReviewTask(index=i, reviewer=a["model"], model=a.get("model_id") or a["model"], messages=state["messages"],
                   system_prompt=state.get("system_prompt"), answers=answers, order=orders[i])
        for i, a in enumerate(answers)
    ]


ask_reviewers = REVIEWS.dispatch(review_tasks, name="ask_reviewers",
                                 doc="Send every panelist the others' answers to rank, each in its own order.")


async def count_ranks(state: dict[str, Any]) -> dict[str, Any]:
    """Count the reviewers' rankings (Borda) and return the winner verbatim, with the ranking."""
    answers = state["answers"]
    reviews = sorted(state.get("reviews") or [], key=lambda r: r["index"])
    scores = borda([r["ranking"] for r in reviews], len(answers))
    ranking = [{"panelist": answers[s["index"]]["model"], "points": s["points"], "reviews": s["reviews"],
                "score": s["score"]} for s in scores]
    decision = {"rule": "rank", "seed": seed_of(state), "ranking": ranking,
                "reviews": [public_review(r, answers) for r in reviews]}
    if len(answers) < MIN_RANK_ANSWERS:
        return undecided(decision, f"{len(answers)} answers are too few to rank: each panelist ranks the others', "
                                   f"so {MIN_RANK_ANSWERS} are needed")
    top, second = scores[0], scores[1]
    if top["reviews"] == 0:
        return undecided(decision, "no reviewer's ranking could be read")
    if top["score"] == second["score"]:
        tied = " and ".join(r["panelist"] for r in ranking if r["score"] == top["score"])
        return undecided(decision, f"the Borda count is tied: {tied} score {top['score']:.2f} points a review")
    note = prompts.RANK_NOTE.format(ranking="; ".join(
        prompts.RANK_ITEM.format(place=place, panelist=r["panelist"], score=r["score"])
        for place, r in enumerate(ranking, 1)))
    return chosen(state, {**decision, "decidedBy": "borda"}, top["index"], note)


# --- best-of-n ------------------------------------------------------------------------------


# The two readings of the answers; a judge whose model fails (its retries spent) abstains.
JUDGES = FanOut(node="judge", results_key="verdicts", tolerate=is_model_failure, failure=abstention)

judge_answer = judge_answers(candidates=_arbitrators, context=PanelContext)


async def pick_best(state: dict[str, Any], runtime: Runtime[PanelContext]) -> dict[str, Any]:
    """Return the answer both readings picked verbatim; send a disagreement (or an abstention) to the arbitrator."""
    answers = state["answers"]
    given, reversed_ = sorted(state.get("verdicts") or [], key=lambda v: v["swapped"])
    judge = given["judge"] or reversed_["judge"] or _arbitrators(state, panel_context(runtime))[0]
    decision = {"rule": "best-of-n", "judge": judge, "verdicts": [given, reversed_],
                **independence(state, judge, "judge")}
    if given["pick"] is None or reversed_["pick"] is None:
        return undecided(decision, "the judge abstained in one reading (no readable verdict, or its model failed)")
    if agreed_winner(given["panelist"], reversed_["panelist"]) == "tie":
        return undecided(decision, f"the judge picked {given['panelist']} reading the answers in panel order but "
                                   f"{reversed_['panelist']} reading them reversed (a position bias)")
    note = prompts.PICK_NOTE.format(count=len(answers), judge=judge, panelist=given["panelist"])
    return chosen(state, {**decision, "decidedBy": "judge"}, given["pick"], note)
