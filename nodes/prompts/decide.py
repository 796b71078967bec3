"""Prompts of the decision rules that choose one of several answers rather than write a new one: a judge picking
the best (`best-of-n`, `nodes.judge.judge_answers`), a reviewer ranking the others' answers (`rank`,
`nodes.rank.review`), and the note a chosen answer ends with. The answers are shown as the arbitrator sees them
(`nodes.arbitrate.arbitration_messages`: Answer A, B, C, authors' names redacted)."""

PICK_SYSTEM = """You are the judge of a panel of independent experts who each answered the same request.
Read every answer, then pick the single best one: the most accurate, best reasoned and most useful to the person
who asked. Judge the content only, not its length, its style or its place in the list, and do not guess who wrote
which answer."""

PICK_REQUEST = """{conversation}

The panel's answers to the last message above:

{answers}

Which answer is the best? Give its letter, and your reason in one or two sentences."""

RANK_SYSTEM = """You answered a request yourself; now review the answers other experts gave to it.
Rank their answers from best to worst on accuracy, reasoning and usefulness to the person who asked.
Judge the content only, not its length, its style or its place in the list, and do not guess who wrote
which answer."""

RANK_REQUEST = """{conversation}

Other experts' answers to the last message above:

{answers}

Rank these answers from best to worst: list every letter exactly once, best first, and give your reason in one
or two sentences."""

# What a chosen answer ends with, so that the reader sees how it was chosen (`_meta.decision` has the details).
NOTE_SEPARATOR = "\n\n---\n\n"
VOTE_NOTE = "**Majority vote** (answers read as `{rule}`): {tally}."
VOTE_ITEM = "{answer} × {count} ({panelists})"
VOTE_UNREADABLE = "unreadable × {count} ({panelists})"
RANK_NOTE = "**Ranking** (Borda count; each panelist ranked the others' answers, never its own): {ranking}."
RANK_ITEM = "{place}. {panelist} ({score:.2f} points a review)"
PICK_NOTE = "**Best of {count}**: the judge ({judge}) chose {panelist}'s answer reading them in both orders."
AGREED_NOTE = ("**Adaptive depth**: {first} and {second}, of distinct families, answered alike (agreement "
               "{agreement:.2f}, at least {threshold:.2f}), so the rest of the panel and the rule were not asked.")
