"""The exported JSON Schema accepts the examples and refuses broken workflows, as editors would see it."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from parley.designer import example_files, load_example, validate_workflow, workflow_json_schema


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = workflow_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schema_is_draft_2020_12_and_versioned():
    schema = workflow_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "Parley workflow (version 1)"
    assert schema["properties"]["version"]["const"] == 1
    assert set(schema["required"]) == {"name", "nodes", "entry"}
    assert {"from", "to"} <= set(schema["$defs"]["Edge"]["properties"])


@pytest.mark.parametrize("name", sorted(example_files()))
def test_schema_validates_every_example(validator, name):
    document = load_example(name)
    assert not list(validator.iter_errors(document))
    assert isinstance(document["sampleInput"], dict)


def _broken(mutate):
    document = copy.deepcopy(load_example("outline-brief"))
    mutate(document)
    return document


BROKEN = {
    "unknown node type": lambda d: d["nodes"][0].update(type="magic"),
    "no nodes": lambda d: d.update(nodes=[]),
    "no entry": lambda d: d.pop("entry"),
    "unknown field": lambda d: d["nodes"][0].update(outptu_key="x"),
    "temperature too high": lambda d: d["nodes"][0]["config"].update(temperature=3),
    "edge without target": lambda d: d["edges"][0].pop("to"),
    "bad node id": lambda d: d["nodes"][0].update(id="has space"),
    "bad state key name": lambda d: d["state"].update({"bad-key": {"type": "string"}}),
    "unknown state type": lambda d: d["state"]["topic"].update(type="text"),
    "wrong version": lambda d: d.update(version=2),
    "unknown transform op": lambda d: d["nodes"][1]["config"].update(op="upper"),
    "llm without prompt": lambda d: d["nodes"][0]["inputs"].pop("prompt"),
    "sampleInput not an object": lambda d: d.update(sampleInput=["topic"]),
}


@pytest.mark.parametrize("what", sorted(BROKEN))
def test_schema_rejects_broken_workflows(validator, what):
    document = _broken(BROKEN[what])
    assert list(validator.iter_errors(document)), f"the JSON Schema accepted a workflow with {what}"
    with pytest.raises(ValueError):  # and the designer agrees
        validate_workflow(document)


def test_the_studio_offers_every_node_type_with_inspector_fields():
    """The Studio's palette (`NODE_TYPES` in doc.ts) lists the schema's node types in its order, and its inspector
    (`FIELDS` in Inspector.tsx) has fields for each, so a new node type cannot be left out of the designer."""
    import re
    from pathlib import Path

    from parley.designer.spec import NODE_TYPES

    views = Path(__file__).resolve().parents[2] / "studio" / "src" / "views" / "designer"
    palette = re.search(r"export const NODE_TYPES = \[(.*?)\] as const;", (views / "doc.ts").read_text(), re.S)
    assert palette and re.findall(r'"(\w+)"', palette.group(1)) == list(NODE_TYPES)
    inspector = (views / "Inspector.tsx").read_text()
    fields = inspector[inspector.index("const FIELDS"):inspector.index("\n};", inspector.index("const FIELDS"))]
    assert re.findall(r"^  (\w+): \[", fields, re.M) == list(NODE_TYPES)
