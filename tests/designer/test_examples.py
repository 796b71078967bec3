"""The bundled examples: each runs as-is from its sampleInput; those needing no mode run here."""

from __future__ import annotations

import pytest

from parley.designer import compile_workflow, example_files, load_example, prepare_input, validate_workflow
from parley.designer.spec import MODE_NODE_TYPES
from tests.designer.conftest import run_workflow

# Examples whose nodes all run without a mode; the others run in test_mode_nodes.py.
LAYER_ONE = sorted(name for name in example_files()
                   if not {n["type"] for n in load_example(name)["nodes"]} & set(MODE_NODE_TYPES))


def test_there_are_the_promised_examples():
    assert {"debate-summary", "duel-panel-review", "roundtable-decision"} <= set(example_files())
    assert LAYER_ONE == ["multiagent-debate", "outline-brief", "tagline-loop"]


@pytest.mark.parametrize("name", sorted(example_files()))
def test_every_example_compiles_and_its_sample_input_fits(name):
    spec = validate_workflow(load_example(name))
    assert spec.sample_input, f"{name} has no sampleInput"
    prepare_input(spec, spec.sample_input)
    compile_workflow(spec)


@pytest.mark.parametrize("name", LAYER_ONE)
async def test_example_runs_as_is_on_the_scripted_model(name, ctx):
    document = load_example(name)
    events, done = await run_workflow(document, document["sampleInput"], ctx)
    written = {key for e in events if e["event"] == "node_end" for key in e["keys"]}
    outputs = {n["output_key"] for n in document["nodes"] if n.get("output_key")}
    assert written == outputs
    assert all(done["state"][key] for key in outputs)
    assert done["usage"]["calls"] >= 2
