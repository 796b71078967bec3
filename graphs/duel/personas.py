"""Built-in opponent personas: the fallback when the model cannot pick an opponent for a topic.

Each archetype argues from a different angle; the choice is a stable function of the topic, and
Chinese, Japanese and Korean topics get the Chinese variants (the closest the library has).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from parley.nodes.text import is_cjk


@dataclass(frozen=True)
class Persona:
    """An opponent archetype in one language; `stance` has a `{topic}` placeholder."""

    name: str
    title: str
    bio: str
    stance: str
    traits: tuple[str, ...]

    def for_topic(self, topic: str) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "bio": self.bio,
            "stance": self.stance.format(topic=topic),
            "traits": list(self.traits),
        }


ENGLISH: tuple[Persona, ...] = (
    Persona(
        "Margaret Hale", "Veteran operations director",
        "Ran large organisations for thirty years and trusts what has been proven to work.",
        "Sceptical of the case for change on “{topic}”: the costs are certain, the benefits speculative.",
        ("pragmatic", "evidence-minded", "blunt"),
    ),
    Persona(
        "Dr. Samuel Okafor", "Economist and policy adviser",
        "Studies how incentives play out at scale and who ends up paying for good intentions.",
        "Argues that on “{topic}” the popular answer ignores second-order effects and hidden costs.",
        ("analytical", "data-driven", "contrarian"),
    ),
    Persona(
        "Elena Vasquez", "Community organiser",
        "Has spent two decades working with the people most affected by decisions made far away.",
        "Holds that on “{topic}” the human cost to ordinary people outweighs the promised gains.",
        ("empathetic", "persistent", "grounded"),
    ),
    Persona(
        "Professor Ian Whitlock", "Philosopher of ethics",
        "Teaches moral philosophy and presses every argument back to its first principles.",
        "Challenges the assumptions behind “{topic}” and defends the opposite view on principle.",
        ("rigorous", "Socratic", "calm"),
    ),
    Persona(
        "Priya Raman", "Risk analyst",
        "Models failure scenarios for a living and has seen optimistic forecasts fail.",
        "Contends that on “{topic}” the risks are underestimated and caution is the wiser course.",
        ("cautious", "precise", "sceptical"),
    ),
)

CHINESE: tuple[Persona, ...] = (
    Persona(
        "李明", "传统管理专家", "在大型企业从事管理工作三十年，相信经过验证的做法。",
        "对“{topic}”持审慎反对立场：代价是确定的，收益却只是设想。",
        ("务实", "重视证据", "直率"),
    ),
    Persona(
        "王建国", "经济学家", "研究政策在现实中的激励效果，关注善意背后由谁买单。",
        "认为在“{topic}”上，主流观点忽视了连锁反应和隐性成本。",
        ("理性", "重数据", "敢于唱反调"),
    ),
    Persona(
        "陈静", "社区工作者", "二十年来一直与受政策影响最深的普通人打交道。",
        "主张在“{topic}”上，普通人付出的代价大于宣称的好处。",
        ("共情", "坚持", "接地气"),
    ),
    Persona(
        "赵文博", "伦理学教授", "讲授道德哲学，习惯把每个论点追问到第一原则。",
        "从原则出发质疑“{topic}”背后的假设，为相反观点辩护。",
        ("严谨", "善于追问", "冷静"),
    ),
    Persona(
        "刘芳", "风险分析师", "以推演失败情景为职业，见过太多过于乐观的预测落空。",
        "认为在“{topic}”上风险被低估了，谨慎才是更明智的选择。",
        ("谨慎", "精确", "怀疑"),
    ),
)


def fallback_opponent(topic: str, user_name: str = "") -> dict:
    """Pick a built-in opponent for `topic` (never one sharing the user's name)."""
    library = CHINESE if is_cjk(topic) else ENGLISH
    start = zlib.crc32(topic.encode()) % len(library)
    for offset in range(len(library)):
        persona = library[(start + offset) % len(library)]
        if persona.name != user_name:
            return persona.for_topic(topic)
    return library[start].for_topic(topic)
