"""The layers hold: `lint-imports` (import-linter) checks the contracts of pyproject.toml's [tool.importlinter]
against this tree's imports, laid out as an install lays them out (the `parley` package of the wheel built from
this tree: the layers' folders sit at the repository's root, mapped into `parley` at install).

The layers, top down: `cli`, `api`, `services`, `runs`, `evals` (which runs workflows as methods), `designer`,
`graphs`, `nodes`, `llm` (the model layer) and `store` (independent of each other), `core`; a package imports only
those below it. No package's modules import each other in a circle, and nothing below `api` imports an HTTP server
library.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = tomllib.loads((ROOT / "pyproject.toml").read_text())
LAYERS = [name.removeprefix("parley.") for name in SETTINGS["tool"]["setuptools"]["package-dir"] if name != "parley"]


def lint_imports(installed: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `lint-imports` from this interpreter's environment on the installed layout of this tree (from its folder:
    the linter puts the working directory first on its path, where the checkout's `parley/` would shadow it)."""
    script = Path(sys.executable).with_name("lint-imports")
    command = [str(script)] if script.exists() else [shutil.which("lint-imports") or "lint-imports"]
    env = {**os.environ, "PYTHONPATH": str(installed)}
    if "--config" not in args:
        args = ("--config", str(ROOT / "pyproject.toml"), *args)
    return subprocess.run([*command, "--no-cache", *args], cwd=installed, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_layer_contracts_are_kept(installed):
    contracts = SETTINGS["tool"]["importlinter"]["contracts"]
    result = lint_imports(installed)
    assert result.returncode == 0, result.stdout + result.stderr
    for contract in contracts:
        assert f"{contract['name']} KEPT" in result.stdout


def test_a_broken_layer_is_reported(installed, tmp_path):
    """The linter reads this tree's real imports: a contract the code breaks (nodes use the model layer) fails."""
    config = tmp_path / "layers.toml"
    config.write_text("""[tool.importlinter]
root_packages = ["parley"]

[[tool.importlinter.contracts]]
name = "nodes without the model layer"
type = "forbidden"
source_modules = ["parley.nodes"]
forbidden_modules = ["parley.llm"]
""")
    result = lint_imports(installed, "--config", str(config))
    assert result.returncode != 0 and "nodes without the model layer BROKEN" in result.stdout
    assert "parley.nodes.structured -> parley.llm." in result.stdout


def _python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.py"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def bare_imports(source: str) -> list[str]:
    """The imports in `source` that name one of Parley's layers at the top level (`import core`, `from api.x ...`)
    instead of under `parley`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"line {node.lineno}: {name}" for name in names if name.split(".")[0] in LAYERS]
    return found


def test_no_code_imports_a_layer_outside_parley():
    """Every import of Parley's code reads `parley.…`: in the code, tests, bench and docs' scripts alike."""
    offenders = {str(path.relative_to(ROOT)): found for path in _python_files()
                 if (found := bare_imports(path.read_text(encoding="utf-8")))}
    assert offenders == {}


def test_a_bare_import_is_caught():
    assert bare_imports("import core\nfrom api.main import x\nimport parley.core\nfrom parley import store\n") == [
        "line 1: core", "line 2: api.main"]


def test_the_installed_command_runs_outside_the_tree(tmp_path):
    """The venv's `parley` (an editable install) imports the CLI and every layer under it, run from elsewhere."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", "import parley.cli.main, parley.services.panel, parley.api.main"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
