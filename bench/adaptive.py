"""Adaptive depth's saving: tokens per answer of the full panel against `depth: "adaptive"` on a scripted mix.

Each question of the mix goes to the panel graph twice, in-process, against the scripted model server: once with the
whole panel (`depth: "full"`) and once adaptive (two seats of distinct families first, the rest only when their
answers disagree). In `--agree` of the questions (70 % by default) the first two seats give the same answer; in the
rest they answer differently. Every answer is about `--answer-words` words, the arbitrator's too, and the question
carries `--context-words` words of context (a chat's history), so the figures weigh prompts and answers as a
real request does. Tokens are those the run's ledger records (the scripted server counts them as a real endpoint
would report them). It prints, per panel size, tokens per answer of each, adaptive ÷ full, the saving, and the
model calls.

Run from the repository root:  .venv/bin/python bench/adaptive.py [--questions 40] [--agree 0.7] [--sizes 3,5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parley.core.settings import Settings  # noqa: E402
from parley.graphs.panel import PanelContext, graph, panel_input  # noqa: E402
from parley.llm.factory import ModelFactory  # noqa: E402
from parley.llm.usage import UsageLedger  # noqa: E402
from tests.support.scripted_llm import ScriptedLLM  # noqa: E402

MODELS = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro", "mistral:mistral-large-latest",
          "deepseek:deepseek-chat", "x-ai:grok-4", "meta:llama-4-maverick"]
ARBITRATOR = "qwen:qwen3-235b-a22b"
# A vocabulary as wide as prose's, so two answers written apart share few sentences (as two models' do when they
# disagree); the words themselves do not matter to the token counts.
WORDS = [f"{stem}{n}" for stem in ("service", "deploy", "team", "cost", "schema", "cache", "queue", "budget")
         for n in range(400)]


def prose(rng: random.Random, words: int) -> str:
    """`words` words of sentence-shaped text, drawn from `rng` (distinct texts share few sentences)."""
    out, sentence = [], []
    for _ in range(words):
        sentence.append(rng.choice(WORDS))
        if len(sentence) >= rng.randint(8, 14):
            out.append(" ".join(sentence).capitalize() + ".")
            sentence = []
    return " ".join(out + ([" ".join(sentence).capitalize() + "."] if sentence else []))


def script_mix(llm: ScriptedLLM, questions: int, agree: float, size: int, answer_words: int, seed: int) -> list[str]:
    """Script each question's answers; return the questions (each names itself, so rules match one question)."""
    rng = random.Random(seed)
    asked = []
    agreeing = set(rng.sample(range(questions), round(questions * agree)))
    for q in range(questions):
        tag = f"[question {q}]"
        shared = prose(rng, answer_words)
        for seat, model in enumerate(MODELS[:size]):
            same = seat == 0 or (seat == 1 and q in agreeing)
            llm.script(model=model.split(":", 1)[1], match=tag, reply=shared if same else prose(rng, answer_words))
        llm.script(model=ARBITRATOR.split(":", 1)[1], match=tag, reply=prose(rng, answer_words))
        asked.append(tag)
    return asked


async def run(factory: ModelFactory, question: str, context: str, size: int, depth: str) -> tuple[int, int, str]:
    ledger = UsageLedger()
    inputs = panel_input([{"role": "user", "content": f"{question} {context} What should we do?"}],
                         models=MODELS[:size], arbitrators=[ARBITRATOR], panel_size=size, depth=depth)
    out = await graph.ainvoke(inputs, context=PanelContext(models=factory, ledger=ledger))
    records = ledger.records
    return sum(r.input_tokens + r.output_tokens for r in records), len(records), (out.get("adaptive") or {}).get(
        "path", "full")


async def bench(args: argparse.Namespace) -> None:
    with ScriptedLLM() as llm:
        settings = Settings(_env_file=None, openai_base_url=llm.base_url, openai_api_key="sk-bench")
        factory = ModelFactory(settings)
        context = prose(random.Random(args.seed + 1), args.context_words)
        print(f"{args.questions} questions, first two seats agree in {args.agree:.0%}; answers ~{args.answer_words} "
              f"words, context ~{args.context_words} words\n")
        print(f"{'seats':>5} {'full tok/answer':>16} {'adaptive tok/answer':>20} {'ratio':>6} {'saved':>6} "
              f"{'calls full':>10} {'calls adaptive':>14} {'agreed':>7}")
        for size in args.sizes:
            llm.reset()
            questions = script_mix(llm, args.questions, args.agree, size, args.answer_words, args.seed)
            full = [await run(factory, q, context, size, "full") for q in questions]
            adaptive = [await run(factory, q, context, size, "adaptive") for q in questions]
            full_tokens = sum(t for t, _, _ in full) / len(full)
            adaptive_tokens = sum(t for t, _, _ in adaptive) / len(adaptive)
            agreed = sum(path == "agreed" for _, _, path in adaptive)
            ratio = adaptive_tokens / full_tokens
            print(f"{size:>5} {full_tokens:>16.0f} {adaptive_tokens:>20.0f} {ratio:>6.3f} {1 - ratio:>6.1%} "
                  f"{sum(c for _, c, _ in full) / len(full):>10.2f} {sum(c for _, c, _ in adaptive) / len(adaptive):>14.2f}"
                  f" {agreed:>4}/{len(adaptive)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--agree", type=float, default=0.7, help="share of questions whose first two seats agree")
    parser.add_argument("--sizes", type=lambda v: [int(s) for s in v.split(",")], default=[3, 5])
    parser.add_argument("--answer-words", type=int, default=200)
    parser.add_argument("--context-words", type=int, default=60)
    parser.add_argument("--seed", type=int, default=35)
    asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
