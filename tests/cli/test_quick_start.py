"""The README's quick start holds together: the key it makes sees what the commands after it make, and may use
everything the Studio and the designer need."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from parley.cli.main import app

README = Path(__file__).resolve().parents[2] / "README.md"
runner = CliRunner()


def readme_key_command() -> list[str]:
    """The README's `parley keys create ...` line, as arguments."""
    line = next(line for line in README.read_text(encoding="utf-8").splitlines() if "parley keys create" in line)
    return line.split("#")[0].split("parley", 1)[1].split()


def test_the_readme_key_sees_the_agents_the_commands_add_and_may_run_the_designer(parley_env, http):
    args = readme_key_command()
    assert re.search(r"--workspace default\b", " ".join(args))
    made = runner.invoke(app, args)
    assert made.exit_code == 0, made.output
    key = made.output.strip().splitlines()[-1]
    assert runner.invoke(app, ["agents", "add", "Claire", "--role", "Finance"]).exit_code == 0

    headers = {"Authorization": f"Bearer {key}"}
    agents = http.get("/v1/agents", headers=headers)
    assert agents.status_code == 200 and [a["name"] for a in agents.json()["agents"]] == ["Claire"], agents.text
    me = http.get("/v1/me", headers=headers).json()
    assert {"debate", "chat", "conversations", "workflows"} <= set(me["scopes"]), me
    assert http.get("/v1/workflows", headers=headers).status_code == 200
