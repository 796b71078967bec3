"""Scripts for duel tests: an opponent, two debaters' replies and two judges, on the scripted model server."""

from __future__ import annotations

from tests.support.scripted_llm import ScriptedLLM

SELECT_MARK = "You cast debate opponents"
JUDGE_MARK = "impartial debate judge"
CONTINUE_MARK = "Write only the continuation"

OPPONENT = {
    "name": "Margaret Hale",
    "title": "Operations director",
    "bio": "Ran large teams for three decades.",
    "stance": "Offices should remain the default.",
    "traits": ["pragmatic", "blunt", "precise"],
}
# Within the 100–200 character bounds, several words (chunks) each.
USER_REPLY = ("Remote work widens the talent pool and cuts hours of commuting. "
              "Teams still need deliberate rituals to build trust, and they can.")
OPPONENT_REPLY = ("Offices build trust faster than any video call can. "
                  "Juniors learn by overhearing colleagues, and that is lost at home for good.")

CHINESE_OPPONENT = {"name": "李明", "title": "传统管理专家", "bio": "在大型企业做了三十年管理。",
                    "stance": "办公室仍应是主流。", "traits": ["务实", "直率", "重视证据"]}
CHINESE_USER_REPLY = ("我认为远程工作能够显著提高效率。员工不再把大量时间浪费在通勤上，可以把精力投入到真正重要的工作中。 "
                      "同时，远程协作工具已经非常成熟，团队沟通并不会因此受到明显影响。 "
                      "更重要的是，灵活的工作方式让员工拥有更好的工作与生活平衡。")
CHINESE_OPPONENT_REPLY = ("我不同意这种看法。面对面的交流能够更快地建立信任，新员工也更容易在办公室里学习和成长。 "
                          "远程工作让团队文化变得松散，许多问题只能通过低效的会议来解决。 "
                          "长期来看，这会削弱组织的凝聚力和创新能力，得不偿失。")


def judgement(winner: str = "A", **fields) -> dict:
    """A schema-valid judge answer (winner "A", "B" or "tie")."""
    return {
        "consensus": ["Trust takes deliberate effort"],
        "disagreements": ["Whether output holds up"],
        "winner": winner,
        "winnerReason": f"Speaker {winner if winner != 'tie' else 'A'} gave more concrete evidence.",
        "conclusion": "Remote work works where teams build deliberate rituals.",
        "recommendations": ["Pilot hybrid schedules", "Measure outcomes, not hours"],
        **fields,
    }


def script_duel(
    llm: ScriptedLLM,
    *,
    user_name: str = "Ada",
    opponent: dict | None = None,
    user_reply: str = USER_REPLY,
    opponent_reply: str = OPPONENT_REPLY,
    as_debated: dict | None = None,
    swapped: dict | None = None,
    opponent_turn: dict | None = None,
    user_turn: dict | None = None,
) -> None:
    """Script a whole duel: the opponent choice, both sides' turns, and the two position-swapped judges.

    By default both judges pick the user (A as debated, B when swapped). `opponent_turn` and
    `user_turn` add rule fields (hold, status, drop_after …) to each side's turns.
    """
    opponent = opponent or OPPONENT
    llm.script(match=SELECT_MARK, json=opponent)
    # The swapped transcript opens with the opponent's first turn as Speaker A.
    llm.script(match=f"Speaker A: {opponent_reply[:40]}", json=swapped or judgement("B"))
    llm.script(match=JUDGE_MARK, json=as_debated or judgement("A"))
    llm.script(match=f"You are {user_name},", reply=user_reply, **(user_turn or {}))
    llm.script(match=f"You are {opponent['name']},", reply=opponent_reply, **(opponent_turn or {}))
