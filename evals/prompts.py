"""Prompts of the evaluation: how a question is put (with its rule's answer format, `nodes.prompts.answers`),
and the round table's seats."""

# The answer format (`AnswerRule.instruction`) is appended to every question, whatever the method, so every
# answer can be read back the same way.

QUESTION = "{question}\n\n{instruction}"

ARITHMETIC_QUESTION = "What is the value of {expression}?"

# The round table answers with a recommended action; this topic asks for that action to be the answer.
ROUNDTABLE_TOPIC = (
    "Solve the problem below as a team. The recommended action must state the final answer itself, "
    "in the form `Answer: <value>`."
)

# Seats of the round table when it is used as a solver (a devil's advocate is added by the graph).
ROUNDTABLE_SOLVERS = [
    ("Careful solver", "Solves the problem step by step and checks each step before moving on."),
    ("Sceptical checker", "Recomputes every figure the others give and names the first step that is wrong."),
    ("Plain reader", "Re-reads the question for what it really asks, and catches misread quantities or units."),
    ("Estimator", "Checks every answer against a rough estimate and flags answers of the wrong size."),
    ("Second solver", "Solves the problem a different way from the others, to see whether both ways agree."),
]
