"""The `vote` node: every answer read by an answer rule (`nodes.answers`), the majority taken, no model called.

    count = vote(rule="number", answers=lambda state: [a["answer"] for a in state["answers"]])
    builder.add_node("vote", count)          # writes state["vote"]: the first answer read as the winner

The designer's `vote` node is this node; the panel's `vote` rule reads its answers the same way
(`nodes.answers.majority_answer`) and adds the panel's own decision record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parley.nodes.answers import AnswerRule, Ballot, majority_answer, parse_rule

__all__ = ["vote"]


def vote(
    *,
    rule: str | AnswerRule | Callable[[Any], str | AnswerRule],
    answers: str | Callable[[Any], Sequence[str]] = "answers",
    output_key: str = "vote",
    on_ballot: Callable[[Ballot, AnswerRule], None] | None = None,
    name: str = "vote",
) -> Callable[[Any], Any]:
    """Build a node that takes the majority of answers read by an answer rule, and writes the winner's text.

    The winner is the most common readable answer, a tie going to the one given first; the text written is
    the first answer read as the winner (the first answer when none could be read, "" when there are none).

    Args:
        rule: `number`, `choice`, `exact` or `regex:<pattern>` (`nodes.answers.parse_rule`), an `AnswerRule`, or
            `state -> rule` (read each time the node runs).
        answers: the state key holding the answers (a list of texts), or `state -> texts`.
        output_key: the state key the winner's text goes to.
        on_ballot: called with the whole ballot (each answer's reading, the count, whether it was a tie) and the
            rule, to report it (an event, say).
        name: the node function's name (LangGraph's default node name).

    Raises:
        ValueError: when the rule cannot be read (`parse_rule`'s message).

    Returns:
        The async node `(state) -> update`; no model is called.

    Example:
        >>> import asyncio, parley
        >>> node = parley.vote(rule="number")
        >>> asyncio.run(node({"answers": ["Answer: 4", "It is 5", "answer: 4.0"]}))
        {'vote': 'Answer: 4'}

        In a graph (docs/python.md, custom_debate.py: the majority of the judge's two readings):

        ```python
        builder.add_node("vote", parley.vote(rule="exact", output_key="winner",
                                             answers=lambda state: [v["panelist"] or "" for v in state["verdicts"]]))
        ```
    """

    async def node(state: Mapping[str, Any]) -> dict[str, Any]:
        chosen = rule(state) if callable(rule) else rule
        reading = chosen if isinstance(chosen, AnswerRule) else parse_rule(str(chosen))
        texts = list(answers(state) if callable(answers) else state.get(answers) or [])
        ballot = majority_answer([str(text) for text in texts], reading)
        if on_ballot is not None:
            on_ballot(ballot, reading)
        return {output_key: ballot.text}

    node.__name__ = node.__qualname__ = name
    node.__doc__ = "Read every answer by the rule, take the majority, and write the first answer read as the winner."
    return node
