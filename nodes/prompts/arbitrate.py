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

CRITERIA = """Weigh the answers by these criteria, which the person asking chose:
{criteria}"""

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

# The arbitrator offered the caller's tools (a chat completion with `tools`): it may call them instead of answering.
ARBITRATOR_TOOLS = """You are offered the tools of the person asking, and you may call them. If the answers show that
the request needs a tool's result the conversation does not have yet, call the tool (or tools) with the right
arguments instead of answering; otherwise write the final answer."""

# The final answer must be JSON (a chat completion with `response_format`).
ARBITRATOR_FORMAT = """Write the final answer as JSON only, with no text around it: {schema}"""

# A final answer that is not the JSON asked for gets one more try, shown its answer and what is wrong with it.
FORMAT_REPAIR = """Your answer is not the JSON required: {problem}.
Answer again with JSON only, no text around it, valid against this schema: {schema}"""

# How a conversation's tool calls and their results read to a model offered no tools (a panelist, the arbitrator's
# view of the conversation).
TOOL_CALL_TEXT = "[tool call {id}: {name}({arguments})]"
TOOL_RESULT_TEXT = "[result of tool call {id} ({name})]\n{content}"
