var e=`{
  "version": 1,
  "name": "Duel, then a panel review of the winner",
  "description": "Your persona duels an opponent chosen for the topic; a panel of models then reviews the winning side's argument.",
  "state": {
    "topic": {"type": "string", "required": true, "description": "What the duel is about."},
    "profile": {
      "type": "object",
      "default": {"name": "Ada", "bio": "Software engineer who values evidence over anecdotes"},
      "description": "The persona arguing your side."
    },
    "duel": {"type": "object", "description": "Opponent, transcript, verdict and the winner's argument."},
    "review": {"type": "string", "description": "The panel's answers, each labelled with its model."}
  },
  "nodes": [
    {
      "id": "duel",
      "type": "duel",
      "config": {"rounds": 2},
      "inputs": {"topic": "{topic}", "user_profile": "{profile}"},
      "output_key": "duel"
    },
    {
      "id": "review",
      "type": "panel",
      "config": {"system_prompt": "You review arguments. Be specific and brief."},
      "inputs": {
        "input": "A debate on \\"{topic}\\" was won by the {duel.synthesis.winner} side ({duel.synthesis.winnerReason}). Review the winning argument below: is it sound, and what does it miss?\\n\\n{duel.winner_argument}"
      },
      "output_key": "review"
    }
  ],
  "edges": [{"from": "duel", "to": "review"}],
  "entry": "duel",
  "finish": ["review"],
  "sampleInput": {"topic": "Should remote work be the default for software teams?"}
}
`;export{e as default};