"""Prompts of the panel's own steps: what a panelist is told when the request offers tools or asks for JSON."""

# Panelists are offered no tools (they answer in prose, the arbitrator calls): they are told what it may call.
PANELIST_TOOLS = """The final answer to this conversation may call these tools, whose results come back as messages:
{tools}
You cannot call them yourself. If answering needs a tool's result the conversation does not have yet, say which
tool to call, with which arguments, and why; otherwise answer the request."""

# The final answer must be JSON (`response_format`): a panelist says what it should hold.
PANELIST_FORMAT = """The final answer will be written as JSON valid against this schema: {schema}
Give the content it should hold."""
