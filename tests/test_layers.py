"""The layers hold: `lint-imports` (import-linter) checks the contracts of pyproject.toml's [tool.importlinter]
against this tree's imports.

The layers, top down: `cli`, `api`, `services`, `runs`, `evals` (which runs workflows as methods), `designer`,
`graphs`, `nodes`, `llm` (the model
layer) and `store` (independent of each other), `core`; a package imports only those below it. No package's modules
import each other in a circle, and nothing below `api` imports an HTTP server library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `lint-imports` from this interpreter's environment on this tree (not an installed copy of Parley)."""
    script = Path(sys.executable).with_name("lint-imports")
    command = [str(script)] if script.exists() else [shutil.which("lint-imports") or "lint-imports"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*command, "--no-cache", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_layer_contracts_are_kept():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    result = lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    for contract in contracts:
        assert f"{contract['name']} KEPT" in result.stdout


def test_a_broken_layer_is_reported(tmp_path):
    """The linter reads this tree's real imports: a contract the code breaks (nodes use the model layer) fails."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    packages = ", ".join(f'"{name}"' for name in settings["root_packages"])
    config = tmp_path / "layers.toml"
    config.write_text(f"""[tool.importlinter]
root_packages = [{packages}]

[[tool.importlinter.contracts]]
name = "nodes without the model layer"
type = "forbidden"
source_modules = ["nodes"]
forbidden_modules = ["llm"]
""")
    result = lint_imports("--config", str(config))
    assert result.returncode != 0 and "nodes without the model layer BROKEN" in result.stdout
    assert "nodes.structured -> llm." in result.stdout



def test_every_layer_is_installed():
    """`pip install` ships every package of the layers: the `parley` command imports them from any directory."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = settings["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in settings["tool"]["importlinter"]["root_packages"]:
        assert f"{package}*" in shipped, f"pyproject.toml's packages.find leaves out {package}/"


def test_the_installed_command_runs_outside_the_tree(tmp_path):
    """The venv's `parley` (an editable install) imports the CLI and every layer under it, run from elsewhere."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", "import cli.main, services.panel, api.main"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
