var e=`{
  "version": 1,
  "name": "Round table, then plan or memo",
  "description": "Three personas and a devil's advocate debate a decision; if the recommendation says to go ahead, write a rollout plan, otherwise a memo explaining why to hold off.",
  "state": {
    "question": {"type": "string", "required": true, "description": "The decision at stake."},
    "outcome": {"type": "object", "description": "The round table's synthesis, rounds and transcript."},
    "route": {"type": "string", "description": "Which branch the recommendation led to."},
    "plan": {"type": "string"},
    "memo": {"type": "string"}
  },
  "nodes": [
    {
      "id": "table",
      "type": "roundtable",
      "config": {
        "agents": [
          {"name": "Claire", "role": "Finance", "persona": "Careful controller who checks the cash runway first."},
          {"name": "Marc", "role": "Sales", "persona": "Optimistic sales lead who counts signed letters of intent."},
          {"name": "Ines", "role": "Operations", "persona": "Pragmatic operations manager who asks who will do the work."}
        ]
      },
      "inputs": {"question": "{question}"},
      "output_key": "outcome"
    },
    {
      "id": "decide",
      "type": "condition",
      "description": "Hold off when the recommendation says no, not now, or wait.",
      "config": {
        "key": "outcome.synthesis.recommendedAction",
        "cases": [
          {"op": "matches", "value": "(?i)\\\\b(do not|don't|not now|reject|postpone|delay|wait|hold off|avoid)\\\\b", "goto": "memo"}
        ],
        "default": "plan"
      },
      "output_key": "route"
    },
    {
      "id": "plan",
      "type": "llm",
      "config": {"max_tokens": 300},
      "inputs": {
        "prompt": "The team decided: {outcome.synthesis.recommendedAction}\\n\\nWrite a five-step rollout plan for it, one line per step."
      },
      "output_key": "plan"
    },
    {
      "id": "memo",
      "type": "llm",
      "config": {"max_tokens": 300},
      "inputs": {
        "prompt": "The team decided: {outcome.synthesis.recommendedAction}\\n\\nSummary of the debate: {outcome.synthesis.summary}\\n\\nWrite a short memo to staff explaining why the team holds off for now."
      },
      "output_key": "memo"
    }
  ],
  "edges": [{"from": "table", "to": "decide"}],
  "entry": "table",
  "finish": ["plan", "memo"],
  "sampleInput": {"question": "Should we open a second office in Lyon next quarter?"}
}
`;export{e as default};