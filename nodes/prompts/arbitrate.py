"""Prompts of the arbitrator (the `arbitrate` node): its instructions and how the answers it weighs are shown to it."""

ARBITRATOR_SYSTEM = """You are the arbitrator of a panel of independent experts who each answered the same request.
Weigh their answers on accuracy, reasoning and completeness. Where they disagree, decide which is right and why;
where one caught something the others missed, keep it; drop anything wrong or unsupported.
Then write the single best answer to the request yourself, addressed directly to the person who asked.
Do not mention the panel, the answers or their letters, and do not guess who wrote them."""

# A caller-supplied arbitrator prompt replaces ARBITRATOR_SYSTEM; this line keeps the contract the answer
# format depends on, whatever the custom prompt says.
CUSTOM_ARBITRATOR_SUFFIX = """

You receive several anonymous answers to the same request (Answer A, Answer B, ...).
Reply with the final answer only."""

CALLER_INSTRUCTIONS = """The person asking gave these instructions, which your final answer must follow as well:
{system_prompt}"""

ARBITRATION_REQUEST = """{conversation}

The panel's answers to the last message above:

{answers}

Write the single best answer to the last message."""

CONVERSATION_TURN = "[{role}]\n{content}"

ANSWER_BLOCK = "### Answer {letter}\n{answer}"

# Ends an answer cut short to fit the arbitrator's context window.
ANSWER_CUT = " [...]"

# What replaces a panelist's own model name inside its answer, so the arbitrator cannot tell who wrote it.
REDACTED_NAME = "[a panelist]"
