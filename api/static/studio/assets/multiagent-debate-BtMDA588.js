var e=`{
  "version": 1,
  "name": "Multi-agent debate",
  "description": "Du et al.'s multi-agent debate (2023) from capability nodes: 3 agents × 2 rounds: three agents answer the question on their own, then each reads the others' answers and revises its own; the majority of the revised answers is the answer. Asks the same calls as graphs/multiagent_debate.py with 3 agents and 1 revision round (\`parley eval\`'s debate method by default), and runs in \`parley eval\` as the method workflow:designer/examples/multiagent-debate.json.",
  "state": {
    "question": {"type": "string", "required": true, "description": "The question, with any answer-format instructions."},
    "rule": {"type": "string", "default": "exact", "description": "How an answer is read for the vote: number, choice, exact or regex:<pattern> (\`parley eval\` passes its task's)."},
    "first": {"type": "array", "description": "Round 1: each agent's own answer."},
    "final": {"type": "array", "description": "Round 2: each agent's answer revised after reading the others', the answers the vote reads."},
    "answer": {"type": "string", "description": "The majority answer of the last round."}
  },
  "nodes": [
    {
      "id": "answer_alone",
      "type": "fan_out",
      "description": "Round 1: three agents answer the question on their own.",
      "config": {"branches": 3, "temperature": 0.7, "max_tokens": 512},
      "inputs": {"prompt": "{question}"},
      "output_key": "first"
    },
    {
      "id": "revise",
      "type": "fan_out",
      "description": "Round 2: each agent revises its answer after reading the others' (the debate's revision prompt).",
      "config": {"branches": 3, "temperature": 0.7, "max_tokens": 512},
      "inputs": {"prompt": "{question}", "previous": "{first}"},
      "output_key": "final"
    },
    {
      "id": "majority",
      "type": "vote",
      "description": "The most common revised answer, read by the rule; a tie goes to the lowest-numbered agent.",
      "inputs": {"answers": "{final}", "rule": "{rule}"},
      "output_key": "answer"
    }
  ],
  "edges": [
    {"from": "answer_alone", "to": "revise"},
    {"from": "revise", "to": "majority"}
  ],
  "entry": "answer_alone",
  "finish": ["majority"],
  "sampleInput": {
    "question": "What is the value of 2+3*4+1-2*3?\\n\\nWork it out step by step, then end with a last line of the form \`Answer: <number>\`.",
    "rule": "number"
  }
}
`;export{e as default};