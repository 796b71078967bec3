"""How the `parley` command fails: one `error:` line (the traceback in PARLEY_HOME/logs/cli.log, or on the terminal
with --verbose), install hints that name the extra to install, and `parley eval` checking its extra first."""

from __future__ import annotations

import importlib.util
import sys

from typer.testing import CliRunner

from parley.cli.main import app
from parley.store import keys as key_store

runner = CliRunner()


def _keys_list_raises(monkeypatch) -> None:
    async def broken(*args, **kwargs):
        raise RuntimeError("the disk is on fire\nand a second line")

    monkeypatch.setattr(key_store, "list_keys", broken)


def test_an_unexpected_failure_is_one_line_and_its_traceback_goes_to_the_log(parley_env, monkeypatch):
    _keys_list_raises(monkeypatch)
    result = runner.invoke(app, ["keys", "list"], terminal_width=400)
    assert result.exit_code == 1
    log = parley_env.parley_home / "logs" / "cli.log"
    assert result.output.strip().splitlines() == [
        f"error: RuntimeError: the disk is on fire (the traceback is in {log}; --verbose shows it)"]
    written = log.read_text()
    assert "parley.cli" in written and "Traceback" in written and "the disk is on fire" in written


def test_verbose_shows_the_traceback_on_the_terminal_too(parley_env, monkeypatch):
    _keys_list_raises(monkeypatch)
    result = runner.invoke(app, ["--verbose", "keys", "list"], terminal_width=400)
    assert result.exit_code == 1
    assert "Traceback" in result.output
    assert result.output.strip().splitlines()[-1] == "error: RuntimeError: the disk is on fire"
    assert "Traceback" in (parley_env.parley_home / "logs" / "cli.log").read_text()


def test_an_invalid_setting_is_named_in_one_line(parley_env, monkeypatch):
    from parley.core.settings import get_settings

    monkeypatch.setenv("PARLEY_FIRST_CREDIT_USD", "-1")
    get_settings.cache_clear()
    result = runner.invoke(app, ["keys", "list"], terminal_width=400)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid setting PARLEY_FIRST_CREDIT_USD:"), result.output


def test_serve_without_llama_cpp_names_the_embedded_extra(parley_env, monkeypatch):
    """After `pip install parley`, `parley serve` on the embedded model says which extra brings its server."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else find_spec(name, *a))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name)
    from parley.core.settings import get_settings

    get_settings.cache_clear()
    result = runner.invoke(app, ["serve"], terminal_width=400)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("error: the embedded model server (llama-cpp-python) is not installed: "
                                "`pip install 'parley[embedded]'`"), result.output
    assert "Traceback" not in result.output


def test_eval_without_matplotlib_refuses_before_asking_any_item(parley_env, llm, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError, as uninstalled
    args = ["eval", "run", "--task", "arithmetic", "--methods", "single", "--n", "2", "--out", str(tmp_path / "out")]
    result = runner.invoke(app, args, terminal_width=400)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "`pip install 'parley[eval]'`, or add --no-plot" in lines[0], result.output
    assert llm.requests == []

    llm.script(reply="Answer: 12")
    plotless = runner.invoke(app, [*args, "--no-plot"], terminal_width=400)
    assert plotless.exit_code == 0, plotless.output
    assert not (tmp_path / "out" / "accuracy_vs_tokens.png").exists()
    assert (tmp_path / "out" / "results.md").exists() and "single" in plotless.output
