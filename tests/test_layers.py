"""The service layer knows no HTTP, and the run engine knows neither the services nor the HTTP layer.

Two views of the import graph: every import statement written in a package's files (function-level and
`TYPE_CHECKING` ones included), and the modules a fresh interpreter has loaded once it imported every module of
the package (what those imports pull in, however deep).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HTTP = {"fastapi", "starlette", "sse_starlette", "uvicorn"}


def written_imports(package: str) -> dict[str, set[str]]:
    """Each file of `package` → the top-level names of the modules its import statements name."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


def loaded_by(package: str) -> set[str]:
    """The top-level names of every module loaded by importing each module of `package` in a fresh interpreter."""
    script = (
        "import importlib, json, pkgutil, sys\n"
        f"package = importlib.import_module({package!r})\n"
        "for module in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "    importlib.import_module(module.name)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return set(json.loads(out.stdout.splitlines()[-1]))


def offenders(package: str, forbidden: set[str]) -> dict[str, list[str]]:
    return {path: sorted(names & forbidden) for path, names in written_imports(package).items() if names & forbidden}


def test_the_services_import_no_http_layer():
    assert written_imports("services"), "the services package has no modules"
    assert offenders("services", HTTP | {"api", "cli"}) == {}
    assert loaded_by("services") & (HTTP | {"api", "cli"}) == set()


def test_runs_import_neither_the_services_nor_the_http_layer():
    assert written_imports("runs"), "the runs package has no modules"
    assert offenders("runs", HTTP | {"api", "cli", "services"}) == {}
    assert loaded_by("runs") & (HTTP | {"api", "cli", "services"}) == set()


def test_the_checks_see_a_forbidden_import(tmp_path, monkeypatch):
    """The written-imports view finds an import inside a function (as the engine's starters once had)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mode.py").write_text("def start():\n    from api.deps import Principal\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert offenders("pkg", {"api"}) == {"pkg/mode.py": ["api"]}
