"""The revision turn of a multi-agent debate (Du et al. 2023): an agent's prompt once it has read the others.

    messages = revision_messages(question, own=my_last_answer, others=their_last_answers, prompt_budget=budget)

Used by `graphs.multiagent_debate`'s agents and by the designer's `fan_out` node with `inputs.previous`,
so a debate designed from parts asks exactly what the built-in one asks.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from parley.llm.tokens import approx_text_tokens, clip_text
from parley.nodes.arbitrate import MIN_ANSWER_TOKENS
from parley.nodes.prompts import multiagent_debate as prompts


def revision_messages(
    question: str,
    own: str | None,
    others: Sequence[str],
    *,
    prompt_budget: int | None,
    revise_prompt: str = prompts.REVISE_PROMPT,
    other_answer: str = prompts.OTHER_ANSWER,
) -> list[BaseMessage]:
    """The question alone when there is no previous answer (`own` is None); else the question, the agent's own
    last answer, and `revise_prompt` showing the others' (each as `other_answer`) and asking for a revision.

    With a `prompt_budget` (tokens, from the model's context window) every previous answer is cut to an
    equal share of what the question leaves, so all of them reach the model.

    Args:
        revise_prompt: takes `{answers}` (the others' answers, shown) and `{question}`.
        other_answer: takes `{number}` (1, 2, … among the others) and `{answer}`.
    """
    if own is None:
        return [HumanMessage(question)]
    others = list(others)
    if prompt_budget is not None:
        room = prompt_budget - 2 * approx_text_tokens(question) - approx_text_tokens(revise_prompt)
        share = max(MIN_ANSWER_TOKENS, room // (len(others) + 1))
        own, others = clip_text(own, share), [clip_text(answer, share) for answer in others]
    shown = "\n\n".join(other_answer.format(number=i + 1, answer=answer) for i, answer in enumerate(others))
    return [
        HumanMessage(question),
        AIMessage(own),
        HumanMessage(revise_prompt.format(answers=shown or "(none)", question=question)),
    ]
