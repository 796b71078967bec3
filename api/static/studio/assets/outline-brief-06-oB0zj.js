var e=`{
  "version": 1,
  "name": "Outline, then brief",
  "description": "One model outlines the topic as structured output, a transform turns the points into a list, and a second call writes the brief.",
  "state": {
    "topic": {"type": "string", "required": true},
    "audience": {"type": "string", "default": "newcomers to the subject"},
    "outline": {"type": "object", "description": "{title, points} from the first call."},
    "bullets": {"type": "string"},
    "brief": {"type": "string"}
  },
  "nodes": [
    {
      "id": "outline",
      "type": "llm",
      "config": {
        "temperature": 0.2,
        "output_schema": {
          "type": "object",
          "properties": {
            "title": {"type": "string", "description": "A short title for the brief."},
            "points": {"type": "array", "items": {"type": "string"}, "description": "Three to five key points, one sentence each."}
          },
          "required": ["title", "points"]
        }
      },
      "inputs": {"prompt": "Outline a short brief on {topic} for {audience}: give a title and three key points."},
      "output_key": "outline"
    },
    {
      "id": "bullets",
      "type": "transform",
      "config": {"op": "join", "keys": ["outline.points"], "separator": "\\n- "},
      "output_key": "bullets"
    },
    {
      "id": "brief",
      "type": "llm",
      "config": {"max_tokens": 300},
      "inputs": {"prompt": "Write a brief titled \\"{outline.title}\\" for {audience}, in one paragraph, covering:\\n- {bullets}"},
      "output_key": "brief"
    }
  ],
  "edges": [{"from": "outline", "to": "bullets"}, {"from": "bullets", "to": "brief"}],
  "entry": "outline",
  "finish": ["brief"],
  "sampleInput": {"topic": "how vaccines train the immune system"}
}
`;export{e as default};