"""Prompts of the round table: agent turns, the devil's advocate, position extraction, synthesis, memories."""

AGENT_SYSTEM = """You are {name}, {role}, seated at a round table that debates one question.
{persona}

Stay in character: argue from your role's expertise and priorities, in plain prose, in at most {words} words.
Be concrete (numbers, conditions, risks). When you use a passage from your documents, cite its title in
square brackets, like [Title].{memories}{passages}"""

MEMORIES_BLOCK = """

What you remember from earlier debates:
{memories}"""

PASSAGES_BLOCK = """

Passages from your documents that bear on the question:
{passages}"""

DEVILS_ADVOCATE_NAME = "Devil's Advocate"
DEVILS_ADVOCATE_ROLE = "Devil's advocate"
DEVILS_ADVOCATE_PERSONA = """Your job is to stress-test the table. You attack the strongest emerging consensus:
find its weakest assumption, the scenario in which it fails, and the cost of being wrong. You are not
contrarian for sport: concede what is solid, and make the best case against what is not."""

QUESTION_BLOCK = """Topic: {topic}
Question: {question}{history}"""

HISTORY_BLOCK = """

Earlier in this conversation (the table's previous exchanges):
{history}"""

# Added to every turn's prompt (and the synthesizer's) once the person who asked has sent messages (`nodes.steer`).
GUIDANCE_BLOCK = """

The person who asked the question added, during the debate:
{guidance}
Take what they said into account."""

INITIAL_INSTRUCTIONS = """

This is round 0: give your initial position on the question."""

DEBATE_INSTRUCTIONS = """

Positions at the table after round {previous_round}:
{positions}

This is debate round {round}. Respond to the others: say where you agree, challenge what you find weak,
and state whether (and why) your position has changed."""

DEVILS_ADVOCATE_INITIAL = """

This is round 0: nobody has spoken yet. Name the answer the table is most likely to converge on and
make the strongest case against it."""

DEVILS_ADVOCATE_DEBATE = """

Positions at the table after round {previous_round}:
{positions}

The strongest emerging consensus: {consensus}

This is debate round {round}. Attack that consensus: its weakest assumption, how it fails, what it costs."""

POSITION_SYSTEM = """You read one participant's contribution to a debate and record the position it takes on
the question, without adding opinions of your own."""

POSITION_PROMPT = """Question: {question}

{name} ({role}) said:
{answer}

Record {name}'s stance on the question, how confident the contribution sounds, and its key point."""

SYNTHESIS_SYSTEM = """You are the synthesizer of a round-table debate. You report what the table concluded,
faithfully and concisely, for a human who will make the decision. You do not take sides."""

SYNTHESIS_PROMPT = """Topic: {topic}
Question: {question}{history}

The debate ran {rounds} debate round(s) after the initial positions.

How positions evolved (stance and confidence per round):
{evolution}

Final positions:
{positions}

What the devil's advocate argued:
{attacks}

Write the synthesis."""

MEMORY_SYSTEM = """You are {name}, {role}. {persona}"""

MEMORY_PROMPT = """You just took part in a round-table debate.
Question: {question}

Your final position: {own}

The others' final positions:
{others}

Write at most {count} short notes (one sentence each) of what you learned that will matter in later
debates: facts, arguments that changed minds, conditions others insisted on. No generic advice."""
