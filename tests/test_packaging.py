"""What an install of Parley puts into site-packages: one import package, `parley`, holding every layer, and the
`parley` command; and the front door (`import parley`) that loads no server library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.wheel import tracked_files, wheel_names

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIR = SETTINGS["tool"]["setuptools"]["package-dir"]


def test_the_wheel_holds_one_import_package(wheel):
    tops = {name.split("/")[0] for name in wheel_names(wheel)}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"parley"}


def test_an_install_adds_parley_and_nothing_else(installed):
    """`pip install --target` lays out what an install adds to site-packages (and `bin/`, the `parley` command)."""
    added = {path.name for path in installed.iterdir() if not path.name.endswith(".dist-info")}
    assert added == {"parley", "bin"}
    assert [path.name for path in (installed / "bin").iterdir()] == ["parley"]
    assert (installed / "parley" / "__init__.py").is_file()
    assert sorted(p.name for p in (installed / "parley").iterdir() if p.is_dir() and p.name != "__pycache__") == \
        sorted(name.removeprefix("parley.") for name in PACKAGE_DIR if name != "parley")


def test_every_module_of_every_layer_is_shipped(wheel):
    """Each tracked module of a layer's folder is in the wheel under `parley/` (a package left out of
    pyproject.toml's list would be missing), as are the Studio bundle, the designer's examples and the eval data."""
    shipped = set(wheel_names(wheel))
    expected = []
    for package, folder in PACKAGE_DIR.items():
        inside = package.replace(".", "/")
        expected += [inside + name.removeprefix(folder) for name in tracked_files()
                     if name.startswith(folder + "/") and name.endswith(".py")]
    assert expected and sorted(set(expected) - shipped) == []
    for data in ("parley/api/static/studio/index.html", "parley/designer/examples/debate-summary.json",
                 "parley/evals/data/gsm8k_test_100.jsonl"):
        assert data in shipped


def test_the_command_is_the_cli_of_the_package(wheel):
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        assert "parley = parley.cli.main:app" in archive.read(entry_points).decode()


def _fresh_python(code: str, cwd: Path, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_importing_parley_loads_no_server_library(installed, tmp_path):
    """`import parley` (the installed copy) loads neither FastAPI, uvicorn, starlette, pymongo nor the MCP SDK, and
    neither does a graph read through it."""
    code = """
import json, sys
import parley
light = [m for m in ("fastapi", "uvicorn", "starlette", "pymongo", "mcp", "parley.graphs") if m in sys.modules]
parley.build_panel_graph, parley.build_round_table_graph, parley.build_duel_graph, parley.compile_workflow
heavy = [m for m in ("fastapi", "uvicorn", "starlette", "pymongo", "mcp") if m in sys.modules]
print(json.dumps([parley.__file__, light, heavy]))
"""
    result = _fresh_python(code, tmp_path, installed)
    assert result.returncode == 0, result.stderr
    where, light, heavy = json.loads(result.stdout)
    assert Path(where).is_relative_to(installed)
    assert light == [] and heavy == []


def test_every_public_name_resolves():
    import parley

    assert set(parley.__all__) - {"__version__"} and parley.__version__ == SETTINGS["project"]["version"]
    for name in parley.__all__:
        assert getattr(parley, name) is not None, name
    assert set(parley.__all__) <= set(dir(parley))


def test_an_unknown_name_is_an_attribute_error():
    import parley

    try:
        parley.build_nothing  # noqa: B018
    except AttributeError as exc:
        assert "build_nothing" in str(exc)
    else:
        raise AssertionError("an unknown name was found")


def test_a_user_project_with_its_own_core_api_and_store_does_not_shadow_parley(tmp_path):
    """Beside a project with its own top-level `core/`, `api/` and `store.py` (first on sys.path, as when its
    scripts run), Parley's modes, runs and server still import their own."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("MINE = True\n")
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "__init__.py").write_text("MINE = True\n")
    (tmp_path / "store.py").write_text("MINE = True\n")
    code = """
import core, api, store
from parley.graphs.panel import panel_node
from parley.runs.checkpoints import mongodb_saver
from parley.api.main import create_app
import parley.core.limits
assert core.MINE and api.MINE and store.MINE
print("ok")
"""
    result = _fresh_python(code, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_python_dash_m_parley_is_the_command(tmp_path):
    result = subprocess.run([sys.executable, "-m", "parley", "--help"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "serve" in result.stdout, result.stderr
