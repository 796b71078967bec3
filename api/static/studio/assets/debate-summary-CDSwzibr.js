var e=`{
  "version": 1,
  "name": "Debate, then summarize",
  "description": "A panel of models from distinct families answers the question, an arbitrator writes the verdict, and one model summarizes it for the audience.",
  "state": {
    "question": {"type": "string", "required": true, "description": "The question to decide."},
    "audience": {"type": "string", "default": "a busy executive", "description": "Who the summary is for."},
    "verdict": {"type": "string", "description": "The arbitrated answer of the debate."},
    "summary": {"type": "string", "description": "The verdict, summarized for the audience."}
  },
  "nodes": [
    {
      "id": "debate",
      "type": "debate",
      "description": "Panel plus arbitrator; writes the verdict.",
      "config": {
        "system_prompt": "Answer in at most five sentences and give one concrete reason.",
        "arbitrator_prompt": "Combine the strongest points of the answers into one clear recommendation."
      },
      "inputs": {"input": "{question}"},
      "output_key": "verdict"
    },
    {
      "id": "summarize",
      "type": "llm",
      "config": {"temperature": 0.3, "max_tokens": 200},
      "inputs": {
        "system": "You write short, plain summaries.",
        "prompt": "Summarize this verdict for {audience} in three sentences.\\n\\nQuestion: {question}\\n\\nVerdict: {verdict}"
      },
      "output_key": "summary"
    }
  ],
  "edges": [{"from": "debate", "to": "summarize"}],
  "entry": "debate",
  "finish": ["summarize"],
  "sampleInput": {
    "question": "Should a ten-person startup adopt a four-day work week?",
    "audience": "the startup's investors"
  }
}
`;export{e as default};