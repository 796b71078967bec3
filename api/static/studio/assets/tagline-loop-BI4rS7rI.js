var e=`{
  "version": 1,
  "name": "Draft and review until approved",
  "description": "Write a tagline, have it reviewed, and rewrite with the feedback until the reviewer approves or three drafts exist.",
  "state": {
    "product": {"type": "string", "required": true},
    "drafts": {"type": "array", "reducer": "append", "default": [], "description": "Every draft, oldest first."},
    "review": {
      "type": "object",
      "default": {"approved": false, "feedback": "none yet"},
      "description": "The latest review: {approved, feedback}."
    }
  },
  "nodes": [
    {
      "id": "write",
      "type": "llm",
      "config": {"temperature": 0.8, "max_tokens": 60},
      "inputs": {
        "prompt": "Write one tagline (under twelve words) for {product}. Earlier drafts: {drafts}. Reviewer feedback: {review.feedback}"
      },
      "output_key": "drafts"
    },
    {
      "id": "review",
      "type": "llm",
      "config": {
        "temperature": 0,
        "output_schema": {
          "type": "object",
          "properties": {
            "approved": {"type": "boolean", "description": "True when the tagline is ready to use."},
            "feedback": {"type": "string", "description": "One sentence on how to improve it."}
          }
        }
      },
      "inputs": {"prompt": "Review this tagline for {product}: {drafts.-1}"},
      "output_key": "review"
    }
  ],
  "edges": [
    {"from": "write", "to": "review"},
    {"from": "review", "to": "__end__", "when": {"key": "review.approved", "op": "truthy"}},
    {"from": "review", "to": "__end__", "when": {"key": "drafts.2", "op": "truthy"}},
    {"from": "review", "to": "write"}
  ],
  "entry": "write",
  "sampleInput": {"product": "a reusable coffee cup that keeps drinks hot for six hours"}
}
`;export{e as default};