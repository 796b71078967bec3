"""Answer formats: the instruction added to a question so that its answer can be read back by a rule
(`nodes.answers.AnswerRule`)."""

NUMBER_FORMAT = "Work it out step by step, then end with a last line of the form `Answer: <number>`."
CHOICE_FORMAT = "Think it through, then end with a last line of the form `Answer: <letter>`."
EXACT_FORMAT = "Think it through, then end with a last line of the form `Answer: <your answer>`."
