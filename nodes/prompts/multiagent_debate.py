"""Prompts of the multi-agent debate (Du et al. 2023): agents answer, then revise after reading each other."""

# Round 0 sends the question as it is; later rounds add this after the agent's own previous answer.
REVISE_PROMPT = """Other agents answered the same question. Their latest answers:

{answers}

Treat their reasoning as evidence, not as authority: check it against your own, keep what holds up, \
and correct whatever you now think is wrong, in their answers or in yours. Then give your updated answer \
to the question, which was:

{question}"""

OTHER_ANSWER = "--- Agent {number} ---\n{answer}"

# Added to the question once the person who asked has sent messages during the debate (`nodes.steer`).
GUIDANCE = """{question}

The person who asked added, during the debate:
{guidance}"""
