"""docs/python.md's scripts run as written: each ```python block is a whole script, run in a subprocess from a user's
project (its own `core/` and `api/` packages and `store.py`, first on sys.path) against the scripted model server,
and prints what the page says it does. The docstring examples of the front door's names that need no model run here
too (doctest)."""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import parley
from tests.conftest import MODEL_ENV
from tests.support.duel import OPPONENT, USER_REPLY, script_duel
from tests.support.scripted_llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
NAME = re.compile(r"\A# ([\w-]+\.py): ")

ARBITRATOR = "You are the arbitrator of a panel"
# The user's own top-level modules: a bare `import core` (or api, store) inside Parley would import them and fail.
USER_PROJECT = {
    "core/__init__.py": 'raise ImportError("the user\'s own core package was imported")\n',
    "api/__init__.py": 'raise ImportError("the user\'s own api package was imported")\n',
    "store.py": 'raise ImportError("the user\'s own store module was imported")\n',
}


def scripts() -> dict[str, str]:
    """Every python block of the page by the file name its first line gives."""
    found: dict[str, str] = {}
    for block in BLOCK.findall(PAGE.read_text(encoding="utf-8")):
        name = NAME.match(block)
        assert name, f"a python block of docs/python.md does not start with '# <file>.py: ...':\n{block[:200]}"
        assert name.group(1) not in found, f"two blocks named {name.group(1)}"
        found[name.group(1)] = block
    return found


@dataclass
class Case:
    """How a script is run and what it must print."""

    script: Callable[[ScriptedLLM], None] = lambda llm: None  # the model's replies the assertions need
    prints: list[str] = field(default_factory=list)  # lines (or parts of lines) the output holds
    env: dict[str, str] = field(default_factory=dict)  # more variables; "" removes one
    check: Callable[[str, ScriptedLLM], None] = lambda out, llm: None


def arbitrator_says(reply: str) -> Callable[[ScriptedLLM], None]:
    return lambda llm: llm.script(match=ARBITRATOR, reply=reply)


def table_read_the_panel(out: str, llm: ScriptedLLM) -> None:
    seats = [r for r in llm.requests if "seated at a round table" in r["messages"][0]["content"]]
    assert seats and all("A panel of models answered: Open in Lyon" in str(r["messages"]) for r in seats)
    assert re.search(r"^calls: (\d+)$", out, re.MULTILINE) and int(re.search(r"^calls: (\d+)$", out, re.M)[1]) == len(
        llm.requests)


def script_trams(llm: ScriptedLLM) -> None:
    # The judge sees the turns as Answer A and B: reading Pro first it picks A, reading Con first it picks B.
    llm.script(match="### Answer A\nTrams", json={"best": "A", "reason": "Answer A counts riders; Answer B does not."})
    llm.script(match="### Answer A\nBuses", json={"best": "B", "reason": "Answer B counts riders; Answer A does not."})
    llm.script(match="You argue for", reply="Trams carry three times the riders of a bus.")
    llm.script(match="You argue against", reply="Buses go wherever the city grows.")


def script_council(llm: ScriptedLLM) -> None:
    llm.script(match=ARBITRATOR, reply="Rewrite it, one slice at a time.")
    llm.script(match="Summarise this advice", json={"decision": "Rewrite in slices", "risks": ["Double billing",
                                                                                                "A long freeze"]})


def one_endpoint(out: str, llm: ScriptedLLM) -> None:
    assert llm.requests and {r["model"] for r in llm.requests} == {"Qwen/Qwen2.5-7B-Instruct"}


def counted_calls(out: str, llm: ScriptedLLM) -> None:
    assert out.count("call debate:") == 4 == len(llm.requests)  # the printing ledger saw each call
    assert all(f"'debate:{r}:{a}': " in out for r in (0, 1) for a in (0, 1))  # by round and agent
    assert "openai:gpt-4o-mini: 4 calls" in out and "(no price known)" not in out
    tokens = int(re.search(r"total: 4 calls, (\d+) tokens, \$0\.0000\d\d", out)[1])
    assert tokens > 0


CASES: dict[str, Case] = {
    "hello_panel.py": Case(
        arbitrator_says("A modular monolith."),
        ["A modular monolith.",
         "panelists: openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, google:gemini-2.5-flash | arbitrator: "
         "openai:gpt-4o-mini"]),
    "panel_then_table.py": Case(
        arbitrator_says("Open in Lyon once the sales lead is hired."),
        ["panel: Open in Lyon once the sales lead is hired.", "table: ", "debate rounds: 1"],
        check=table_read_the_panel),
    "custom_debate.py": Case(
        script_trams,
        ["Pro: Trams carry three times the riders of a bus.", "Con: Buses go wherever the city grows.",
         "judge (as_given): Pro: Pro counts riders; Con does not.",
         "judge (reversed): Pro: Pro counts riders; Con does not.", "winner: Pro"]),
    "council.py": Case(
        script_council,
        ["CFO: ", "CTO: ", "COO: ", "arbitrator: Rewrite it, one slice at a time.",
         "summary: {'decision': 'Rewrite in slices', 'risks': ['Double billing', 'A long freeze']}"]),
    "stream_events.py": Case(
        arbitrator_says("Spaces, set by the formatter."),
        ["[main] asking", "[panel] panelists", "[panel] panelist anthropic:claude-sonnet-4-5 answered: True",
         "[panel] answering", "[panel] chunk of openai:gpt-4o-mini: 'Spaces, '",
         "[panel] chunk of openai:gpt-4o-mini: 'formatter.'", "[panel] decision"]),
    "own_endpoint.py": Case(
        arbitrator_says("A hot dog is a taco."),
        ["A hot dog is a taco.",
         "seats: ['Qwen/Qwen2.5-7B-Instruct', 'Qwen/Qwen2.5-7B-Instruct #2', 'Qwen/Qwen2.5-7B-Instruct #3'] | "
         "arbitrator: Qwen/Qwen2.5-7B-Instruct"],
        env={"OPENAI_BASE_URL": "", "OPENAI_API_KEY": "", "MY_LLM_URL": "{base_url}"}, check=one_endpoint),
    "usage.py": Case(
        lambda llm: llm.script(reply="17 * 3 = 51. Answer: 51"),
        ["final answers: ['17 * 3 = 51. Answer: 51', '17 * 3 = 51. Answer: 51']",
         "by label: {'debate:"], check=counted_calls),
    "duel.py": Case(
        script_duel,
        ["Ada: " + USER_REPLY, f"{OPPONENT['name']}: ", "winner: user - Ada gave more concrete evidence."]),
    "workflow.py": Case(
        lambda llm: llm.script(match="Write a brief titled", reply="Tides follow the moon."),
        ["outline -> bullets -> brief", "brief: Tides follow the moon."]),
}


def test_every_script_of_the_page_has_a_case():
    assert sorted(scripts()) == sorted(CASES)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project folder with its own `core/`, `api/` and `store.py`."""
    for name, text in USER_PROJECT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def environment(llm: ScriptedLLM, home: Path, extra: dict[str, str]) -> dict[str, str]:
    """The process environment with Parley pointed at the scripted server only (no database, no .env)."""
    env = {k: v for k, v in os.environ.items() if k not in MODEL_ENV and k != "PYTHONPATH"}
    env.update(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="sk-test", PARLEY_HOME=str(home))
    for name, value in extra.items():
        if value:
            env[name] = value.format(base_url=llm.base_url)
        else:
            env.pop(name, None)
    return env


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_script_runs_from_a_user_project_and_prints_what_the_page_says(name, project, llm):
    case = CASES[name]
    (project / name).write_text(scripts()[name])
    case.script(llm)
    result = subprocess.run([sys.executable, name], cwd=project, env=environment(llm, project / "home", case.env),
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"{name} failed:\n{result.stderr[-3000:]}"
    for expected in case.prints:
        assert expected in result.stdout, f"{name} did not print {expected!r}; it printed:\n{result.stdout}"
    case.check(result.stdout, llm)


# --- the docstrings' examples ------------------------------------------------------------------


def public_objects() -> list[tuple[str, Any]]:
    return [(name, getattr(parley, name)) for name in parley.__all__ if name != "__version__"]


@pytest.mark.parametrize("name, value", public_objects(), ids=[name for name, _ in public_objects()])
def test_the_docstring_states_its_contract_and_runs_its_doctest(name, value):
    """Every public factory says what it does on its docstring's first line; its `>>>` examples (those that call no
    model) run as written."""
    doc = value.__doc__ or ""
    assert doc.strip(), f"parley.{name} has no docstring"
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(value, f"parley.{name}", globs={"parley": parley}):
        runner.run(test)
    assert runner.failures == 0, f"parley.{name}'s doctest failed (see the output above)"
    assert runner.tries == doc.count(">>> "), f"parley.{name}: not every example of its docstring ran"
