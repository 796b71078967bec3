"""Prompts of the duel: choosing an opponent, speaking a turn, and judging the debate."""

SELECT_OPPONENT_SYSTEM = """\
You cast debate opponents. Given a topic and a user's profile, infer the stance the user most \
likely takes on the topic and invent one credible opponent who would argue the opposite. \
Write every field in {language}; give the opponent a realistic name for that language."""

SELECT_OPPONENT_PROMPT = """\
Topic: {topic}

The user:
- name: {name}
- bio: {bio}
- traits: {traits}
- interests: {interests}

Create the opponent."""

SPEAKER_SYSTEM = """\
You are {name}, {title}. {bio}
Your traits: {traits}. Your interests: {interests}.
You are in a live debate on the topic: {topic}
Your position: {stance}
Your opponent is {opponent_name}, whose position is: {opponent_stance}

Rules for every turn:
- Speak in the first person as {name}, in {language}.
- Between {min_chars} and {max_chars} characters: one to three sentences, plain text, no lists, \
no headings, no name prefix, no quotation marks around the turn.
- Answer your opponent's latest point, then advance your own argument. Never switch sides.

The turns spoken so far follow, one message each, oldest first; the last message asks for your turn."""

USER_STANCE = """\
the position you, with your background and interests, most plausibly hold — opposed to your \
opponent's"""

# One earlier turn, as the speakers read it; the turn's own message in their prompts (`nodes.prefix`).
TRANSCRIPT_TURN = "{name}: {content}"

# What the speaker is asked, after the turns so far: the only part of its prompt that changes from call to call.
SPEAKER_TURN = "Round {round} of {rounds}. {cue}"

# Added to a turn's prompt once the person who started the debate has sent messages (`nodes.steer`).
GUIDANCE_BLOCK = """

The person who asked for this debate added:
{guidance}
Take what they said into account in your turn, in character."""

OPENING_CUE = "You open the debate: state your position and your strongest reason."
REPLY_CUE = "Your turn: reply to {opponent_name}'s latest point."
CLOSING_CUE = "This is your last turn: reply, then close with your strongest point."

CONTINUE_PROMPT = """\
That turn has {length} characters; a turn needs {min_chars} to {max_chars}. Continue it with one \
more sentence of about {missing} characters, in {language}. Write only the continuation."""

JUDGE_SYSTEM = """\
You are an impartial debate judge. Judge the arguments on their reasoning, evidence and \
responsiveness to the other side — not on who spoke first, who spoke last, or who wrote more. \
Refer to the debaters only as "Speaker A" and "Speaker B". Write in {language}."""

JUDGE_PROMPT = """\
Topic: {topic}

Transcript ({turns} turns; Speaker A opened each round):
{transcript}

Give your verdict. The conclusion is about the topic itself, at most {conclusion_max_chars} characters."""

TIE_REASON = """\
The two judgements disagreed once the speakers' order was swapped (as debated: {first}; swapped: \
{second}), so the result is a tie. As debated: {first_reason} Swapped: {second_reason}"""

TIE_REASON_CJK = """\
交换发言顺序后两次评判结论不一致（按原顺序：{first}；交换顺序后：{second}），因此判为平局。\
按原顺序的理由：{first_reason} 交换顺序后的理由：{second_reason}"""

# The reason a judgement stands in for a verdict the judge model returned in unreadable form.
UNREADABLE_VERDICT = "This judge's verdict could not be read, so it counts as an abstention."
