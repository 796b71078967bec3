"""The embedded model server's memory: its resident size, and distinct debate-sized prompts to send it
(`bench/embedded_memory.py`, tests/llm/test_embedded_model_memory.py)."""

from __future__ import annotations

import httpx

# A debate turn's system message, some 300 tokens: every prompt below carries it, then a line of its own.
BRIEF = (
    "You are a seat at a round table of advisers. The question before the table is whether the company should open a "
    "second office in Lyon next year. Speak in the first person, in two or three sentences, and answer the point the "
    "previous speaker made before you add your own. Keep to facts you were given; when you estimate, say so. Name the "
    "costs you see (rent, hiring, travel between the offices, the time of the managers who would run it) and the gains "
    "(clients in the region, a pool of engineers who would not move to Paris, a second site should the first close). "
    "Do not repeat what you said in an earlier round. Do not address the moderator. Do not use lists, headings or "
    "markup. The other seats are Claire, who looks after the finances, Marc, who leads sales in the south of France, "
    "and a devil's advocate whose task is to attack whatever the table agrees on. The person who asked wants a clear "
    "recommendation by the end of the third round, with the one condition under which it would change. Earlier "
    "rounds: Claire said the lease in Lyon costs a third of a Paris one, and that hiring ten engineers there would pay "
    "for the office within two years. Marc said three of the five largest prospects of the year are within an hour of "
    "Lyon, and that he loses deals to rivals who can visit the same week. The devil's advocate said a second office "
    "splits a team of forty in two, and that the company has never run two sites before."
)


def distinct_prompts(count: int, start: int = 0) -> list[list[dict[str, str]]]:
    """`count` chat conversations, each the brief and a user line no other one has (the prompt-cache's worst case: no
    two share a whole prompt, so each answered one is a state of its own)."""
    return [[{"role": "system", "content": BRIEF},
             {"role": "user", "content": f"Round {n}: give your view number {n} in one sentence."}]
            for n in range(start, start + count)]


def ask(client: httpx.Client, base_url: str, messages: list[dict[str, str]], max_tokens: int = 4) -> dict:
    """One chat completion of the embedded model (greedy, `max_tokens` at most)."""
    reply = client.post(f"{base_url}/chat/completions", timeout=120,
                        json={"model": "smollm2", "messages": messages, "max_tokens": max_tokens, "temperature": 0})
    reply.raise_for_status()
    return reply.json()


def rss_bytes(pid: int) -> int:
    """The resident set size of process `pid` (Linux: /proc/PID/status's VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")
