"""`parley workflow`: validate, schema, examples and run, in-process against the scripted model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from parley.cli.main import app
from parley.designer import example_files, load_example, workflow_json_schema

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["workflow", *args])


def test_schema_prints_the_json_schema():
    result = invoke("schema")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == workflow_json_schema()


def test_validate_accepts_a_file_or_a_bundled_example(tmp_path):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(load_example("outline-brief")))
    for target in (str(path), "outline-brief"):
        result = invoke("validate", target)
        assert result.exit_code == 0, result.output
        assert "Outline, then brief: 3 nodes, 2 edges" in result.output


def test_validate_lists_every_problem_and_fails(tmp_path):
    document = load_example("outline-brief")
    document["nodes"][2]["inputs"]["prompt"] = "{topik}"
    document["finish"] = ["breif"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    result = invoke("validate", str(path))
    assert result.exit_code == 1
    assert "At node 'brief' (nodes[2].inputs.prompt): unknown state key 'topik'" in " ".join(result.output.split())
    assert "At node 'breif' (finish[0]): unknown node 'breif'" in " ".join(result.output.split())
    assert "2 problem(s)" in " ".join(result.output.split())


@pytest.mark.parametrize(("content", "words"), [("{not json", "is not valid JSON"), (None, "no such file")])
def test_unreadable_files_are_clear_errors(tmp_path, content, words):
    path = tmp_path / "wf.json"
    if content is not None:
        path.write_text(content)
    result = invoke("validate", str(path))
    assert result.exit_code == 2 and words in " ".join(result.output.split())


def test_examples_lists_the_bundled_workflows():
    result = invoke("examples")
    assert result.exit_code == 0
    for name in example_files():
        assert name in result.output


def test_run_streams_progress_and_prints_the_final_state(parley_env, llm):
    llm.script(match="Write a brief", reply="Tides follow the moon.")
    result = invoke("run", "outline-brief", "--input", "topic=tides", "--input", "audience=sailors")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.index("▶ outline") < out.index("✓ outline") < out.index("▶ brief") < out.index("Tides follow")
    assert "✓ brief → brief" in out and "final state" in out
    assert '"audience": "sailors"' in out and "2 model calls" in out


def test_run_quiet_prints_only_the_state_as_json(parley_env, llm):
    result = invoke("run", "tagline-loop", "-q", "-i", "product=tea")
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)
    assert state["product"] == "tea" and len(state["drafts"]) == 1


@pytest.mark.parametrize(("args", "words"), [
    (["--input", "topik=x"], "At input.topik: unknown state key 'topik' (did you mean 'topic'?)"),
    (["--input", "nokey"], "At input.nokey: 'nokey' is not key=value"),
])
def test_run_refuses_input_that_does_not_fit(parley_env, args, words):
    result = invoke("run", "outline-brief", *args)
    assert result.exit_code == 2
    flat = " ".join(result.output.split())
    assert words in flat and "the input does not fit the workflow's state" in flat


def test_a_failing_node_is_reported_with_its_id(parley_env, llm):
    llm.script(match="Outline", status=500)
    result = invoke("run", "outline-brief")
    assert result.exit_code == 1
    assert "At node 'outline'" in result.output
