"""Every way a workflow can be wrong is reported before anything is built, naming the node and JSON path."""

from __future__ import annotations

import copy

import pytest

from parley.core.limits import MAX_PANEL_SIZE
from parley.designer import WorkflowError, compile_workflow, example_files, load_example, validate_workflow
from tests.designer.conftest import wf


def base() -> dict:
    """debate-like start → summarize, all valid (layer-1 nodes only)."""
    return wf(
        [
            {"id": "draft", "type": "llm", "inputs": {"prompt": "Answer {question}"}, "output_key": "verdict"},
            {"id": "summarize", "type": "llm", "inputs": {"prompt": "Summarize {verdict} for {audience}"},
             "output_key": "summary"},
        ],
        {"question": "string", "audience": {"type": "string", "default": "everyone"}, "verdict": "string",
         "summary": "string", "info": "object"},
        [{"from": "draft", "to": "summarize"}],
        finish=["summarize"],
    )


def issues_of(document) -> list:
    with pytest.raises(WorkflowError) as caught:
        validate_workflow(document)
    return caught.value.issues


def only_issue(document):
    issues = issues_of(document)
    assert len(issues) == 1, [str(i) for i in issues]
    return issues[0]


def test_a_valid_workflow_and_every_example_pass():
    assert validate_workflow(base()).name == "test"
    for name in example_files():
        validate_workflow(load_example(name))


def test_the_message_names_node_and_path_exactly():
    doc = base()
    doc["nodes"][1]["inputs"]["prompt"] = "Summarize {verdit} for {audience}"
    issue = only_issue(doc)
    assert (issue.node, issue.path) == ("summarize", "nodes[1].inputs.prompt")
    assert str(issue).startswith("At node 'summarize' (nodes[1].inputs.prompt): unknown state key 'verdit'")
    assert "did you mean 'verdict'" in str(issue)


def _set(path: str, value):
    """A mutation of base() setting one value by a dotted/indexed path."""

    def mutate(doc):
        parts = path.replace("[", ".").replace("]", "").split(".")
        target = doc
        for part in parts[:-1]:
            target = target[int(part)] if part.isdigit() else target[part]
        last = parts[-1]
        if value is _DELETE:
            del target[int(last) if last.isdigit() else last]
        elif last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value

    return mutate


_DELETE = object()


def _append(key: str, item):
    def mutate(doc):
        doc[key].append(item)

    return mutate


CASES = [
    # (what, mutation, node, path, words in the message)
    ("unknown node type", _set("nodes[1].type", "magic"), "summarize", "nodes[1].type",
     "unknown node type 'magic'; choose from llm, transform, condition, debate, panel, duel, roundtable"),
    ("missing node type", _set("nodes[1].type", _DELETE), "summarize", "nodes[1].type", "node type is missing"),
    ("missing id", _set("nodes[1].id", _DELETE), None, "nodes[1].id", "node id is missing"),
    ("bad id", _set("nodes[1].id", "sum:marize"), "sum:marize", "nodes[1].id", "must start with a letter"),
    ("duplicate id", _append("nodes", {"id": "draft", "type": "llm", "inputs": {"prompt": "{question}"},
                                       "output_key": "summary"}), "draft", "nodes[2].id",
     "duplicate node id 'draft' (first at nodes[0])"),
    ("edge to unknown node", _set("edges[0].to", "sumarize"), "draft", "edges[0].to",
     "unknown node 'sumarize' (did you mean 'summarize'?)"),
    ("edge from unknown node", _set("edges[0].from", "drafts"), "drafts", "edges[0].from", "unknown node 'drafts'"),
    ("edge without target", _set("edges[0].to", _DELETE), "draft", "edges[0].to", "'to' is required"),
    ("unknown entry", _set("entry", "start"), "start", "entry", "unknown node 'start'"),
    ("unknown finish", _set("finish", ["summary"]), "summary", "finish[0]", "unknown node 'summary'"),
    ("unreachable node", _append("nodes", {"id": "orphan", "type": "llm", "inputs": {"prompt": "{question}"},
                                           "output_key": "summary"}),
     "orphan", "nodes[2]", "unreachable: no route leads to it from the entry node 'draft'"),
    ("undeclared input key", _set("nodes[0].inputs.prompt", "Answer {qestion}"), "draft", "nodes[0].inputs.prompt",
     "unknown state key 'qestion'"),
    ("undeclared key in a system template", _set("nodes[0].inputs.system", "You are {persona}"), "draft",
     "nodes[0].inputs.system", "unknown state key 'persona'"),
    ("bad template", _set("nodes[0].inputs.prompt", "Answer {question"), "draft", "nodes[0].inputs.prompt",
     "bad template"),
    ("conversion in template", _set("nodes[0].inputs.prompt", "{question!r}"), "draft", "nodes[0].inputs.prompt",
     "conversions"),
    ("unknown input slot", _set("nodes[0].inputs.promt", "x"), "draft", "nodes[0].inputs.promt",
     "unknown field 'promt'; this node type takes: prompt, system"),
    ("missing required input", _set("nodes[0].inputs", {}), "draft", "nodes[0].inputs.prompt", "'prompt' is required"),
    ("undeclared output key", _set("nodes[0].output_key", "answer"), "draft", "nodes[0].output_key",
     "unknown state key 'answer'"),
    ("missing output key", _set("nodes[0].output_key", _DELETE), "draft", "nodes[0].output_key",
     "an llm node needs an output_key"),
    ("output of the wrong type", _set("nodes[0].output_key", "info"), "draft", "nodes[0].output_key",
     "an llm node writes a string, but state key 'info' is declared object"),
    ("config out of range", _set("nodes[0].config", {"temperature": 5}), "draft", "nodes[0].config.temperature",
     "less than or equal to 2"),
    ("unknown config field", _set("nodes[0].config", {"modle": "x"}), "draft", "nodes[0].config.modle",
     "unknown field 'modle'; this node type takes: model, temperature, max_tokens, output_schema"),
    ("unsupported output schema", lambda doc: (_set("nodes[0].config", {"output_schema": {
        "type": "object", "properties": {"when": {"type": "date"}}}})(doc), _set("nodes[0].output_key", "info")(doc)),
     "draft",
     "nodes[0].config.output_schema.properties.when.type", "unsupported type 'date'"),
    ("bad state key name", _set("state.bad-key", {"type": "string"}), None, 'state["bad-key"]',
     "state key name 'bad-key' must be an identifier"),
    ("default of the wrong type", _set("state.audience.default", 3), None, "state.audience.default",
     "default 3 is not of type string"),
    ("append on a scalar key", _set("state.summary.reducer", "append"), None, "state.summary.reducer",
     "'append' needs an array key"),
    ("unsupported version", _set("version", 2), None, "version", "unsupported version 2; this Parley reads version 1"),
    ("unknown top-level field", _set("nodez", []), None, "nodez", "unknown field 'nodez'"),
    ("when on an undeclared key", _set("edges[0].when", {"key": "score", "op": "gt", "value": 3}), "draft",
     "edges[0].when.key", "unknown state key 'score'"),
    ("when with a bad regex", _set("edges[0].when", {"key": "verdict", "op": "matches", "value": "("}), "draft",
     "edges[0].when.value", "bad regular expression"),
    ("in without a list", _set("edges[0].when", {"key": "verdict", "op": "in", "value": "yes"}), "draft",
     "edges[0].when.value", "'in' needs a list"),
    ("gt without a number", _set("edges[0].when", {"key": "verdict", "op": "gt", "value": "3"}), "draft",
     "edges[0].when.value", "'gt' needs a number"),
    ("unknown operator", _set("edges[0].when", {"key": "verdict", "op": "like", "value": "x"}), "draft",
     "edges[0].when.op", "Input should be"),
]


@pytest.mark.parametrize(("what", "mutate", "node", "path", "words"), CASES, ids=[c[0] for c in CASES])
def test_each_problem_names_its_node_and_path(what, mutate, node, path, words):
    doc = base()
    mutate(doc)
    issue = only_issue(doc)
    assert (issue.node, issue.path) == (node, path), str(issue)
    assert words in issue.message
    where = f"At node '{node}' ({path})" if node else f"At {path}"
    assert str(issue) == f"{where}: {issue.message}"


def loop_doc(edges, extra_state=None):
    nodes = [
        {"id": "write", "type": "llm", "inputs": {"prompt": "Draft on {topic}"}, "output_key": "draft"},
        {"id": "check", "type": "llm", "inputs": {"prompt": "Check {draft}"}, "output_key": "review"},
    ]
    return wf(nodes, {"topic": "string", "draft": "string", "review": "string", **(extra_state or {})}, edges)


def test_a_loop_of_plain_edges_has_no_exit():
    issue = only_issue(loop_doc([{"from": "write", "to": "check"}, {"from": "check", "to": "write"}]))
    assert (issue.node, issue.path) == ("write", "nodes[0]")
    assert "the loop through 'write' → 'check' has no exit" in issue.message


def test_a_plain_edge_out_of_a_loop_is_no_exit_since_the_loop_edge_fires_too():
    edges = [{"from": "write", "to": "check"}, {"from": "check", "to": "write"}, {"from": "check", "to": "__end__"}]
    assert "has no exit" in only_issue(loop_doc(edges)).message


def test_a_self_loop_without_exit_is_reported():
    doc = loop_doc([{"from": "write", "to": "check"}, {"from": "check", "to": "check"}])
    issue = only_issue(doc)
    assert (issue.node, issue.path) == ("check", "nodes[1]") and "'check' has no exit" in issue.message


def test_a_loop_with_a_conditional_exit_is_fine():
    edges = [{"from": "write", "to": "check"},
             {"from": "check", "to": "__end__", "when": {"key": "review", "op": "contains", "value": "ok"}},
             {"from": "check", "to": "write"}]
    validate_workflow(loop_doc(edges))


def test_a_loop_left_by_a_condition_node_is_fine():
    doc = loop_doc([{"from": "write", "to": "check"}, {"from": "check", "to": "gate"}])
    doc["nodes"].append({"id": "gate", "type": "condition", "config": {
        "key": "review", "cases": [{"op": "contains", "value": "ok", "goto": "__end__"}], "default": "write"}})
    validate_workflow(doc)


def condition_doc(config, **node_fields):
    doc = base()
    doc["nodes"].append({"id": "gate", "type": "condition", "config": config, **node_fields})
    doc["edges"].append({"from": "draft", "to": "gate"})
    return doc


@pytest.mark.parametrize(("config", "path", "words"), [
    ({"key": "verdit", "cases": [{"goto": "summarize", "value": "x"}]}, "nodes[2].config.key", "unknown state key"),
    ({"key": "verdict", "cases": [{"goto": "sumarize", "value": "x"}]}, "nodes[2].config.cases[0].goto",
     "unknown node 'sumarize'"),
    ({"key": "verdict", "cases": [{"goto": "summarize", "value": "x"}], "default": "nowhere"},
     "nodes[2].config.default", "unknown node 'nowhere'"),
    ({"key": "verdict", "cases": []}, "nodes[2].config.cases", "at least 1 item"),
    ({"key": "verdict", "cases": [{"goto": "summarize", "op": "matches", "value": "[a"}]},
     "nodes[2].config.cases[0].value", "bad regular expression"),
])
def test_condition_node_problems(config, path, words):
    issue = only_issue(condition_doc(config))
    assert (issue.node, issue.path) == ("gate", path) and words in issue.message


def test_a_condition_node_takes_no_edges_and_cannot_write_its_own_key():
    doc = condition_doc({"key": "verdict", "cases": [{"goto": "summarize", "value": "x"}]}, output_key="verdict")
    doc["edges"].append({"from": "gate", "to": "summarize"})
    messages = {(i.path, i.message) for i in issues_of(doc)}
    assert ("nodes[2].output_key", "a condition node cannot write the key it routes on") in messages
    assert any(p == "edges[2].from" and "takes no edges" in m for p, m in messages)


@pytest.mark.parametrize(("config", "inputs", "path", "words"), [
    ({"op": "pick", "key": "verdit"}, None, "nodes[2].config.key", "unknown state key 'verdit'"),
    ({"op": "join", "keys": ["verdict", "sumary"]}, None, "nodes[2].config.keys[1]", "unknown state key 'sumary'"),
    ({"op": "join", "keys": ["verdict"], "field": "x"}, {"template": "{verdict}"}, "nodes[2].inputs.template",
     "a join transform takes no template"),
    ({"op": "format"}, None, "nodes[2].inputs.template", "a format transform needs inputs.template"),
    ({"op": "upper"}, None, "nodes[2].config.op", "unknown op 'upper'; choose from pick, join, format"),
    ({"op": "pick", "key": "verdict..x"}, None, "nodes[2].config.key", "not a state key or a dotted path"),
])
def test_transform_node_problems(config, inputs, path, words):
    doc = base()
    node = {"id": "shape", "type": "transform", "config": config, "output_key": "summary"}
    if inputs:
        node["inputs"] = inputs
    doc["nodes"].append(node)
    doc["edges"].append({"from": "summarize", "to": "shape"})
    issue = only_issue(doc)
    assert (issue.node, issue.path) == ("shape", path) and words in issue.message, str(issue)


def test_mode_node_configs_are_checked_too():
    doc = base()
    doc["state"]["outcome"] = {"type": "object"}
    doc["nodes"] += [
        {"id": "table", "type": "roundtable", "config": {"agents": [{"name": "Doubt", "isDevilsAdvocate": True}]},
         "inputs": {"question": "{question}"}, "output_key": "outcome"},
        {"id": "duel", "type": "duel", "inputs": {"topic": "{subject}"}, "output_key": "outcome"},
        {"id": "panel", "type": "panel", "inputs": {"input": "{question}"}, "output_key": "outcome"},
    ]
    doc["edges"] += [{"from": "summarize", "to": "table"}, {"from": "table", "to": "duel"},
                     {"from": "duel", "to": "panel"}]
    found = {(i.node, i.path): i.message for i in issues_of(doc)}
    assert found == {
        ("table", "nodes[2].config.agents"): "a round table needs at least one agent that is not the devil's advocate",
        ("duel", "nodes[3].inputs.topic"): "unknown state key 'subject'; declare it under state",
        ("panel", "nodes[4].output_key"): "a panel node writes a string, but state key 'outcome' is declared object",
    }


def test_mode_node_config_fields_are_typed():
    doc = base()
    doc["nodes"].append({"id": "panel", "type": "debate", "config": {"panel_size": 9}, "inputs": {"input": "{question}"},
                         "output_key": "verdict"})
    doc["edges"].append({"from": "summarize", "to": "panel"})
    issue = only_issue(doc)
    assert (issue.node, issue.path) == ("panel", "nodes[2].config.panel_size") and f"less than or equal to {MAX_PANEL_SIZE}" in str(issue)


def test_mode_inputs_default_to_conventional_keys_which_must_be_declared():
    doc = base()
    doc["nodes"].append({"id": "panel", "type": "debate", "output_key": "verdict"})
    doc["edges"].append({"from": "summarize", "to": "panel"})
    issue = only_issue(doc)
    assert (issue.node, issue.path) == ("panel", "nodes[2].inputs.input") and "unknown state key 'input'" in str(issue)


def test_every_problem_is_listed_at_once():
    doc = base()
    doc["nodes"][0]["inputs"]["prompt"] = "{nope}"
    doc["nodes"][1]["output_key"] = "nothing"
    doc["edges"].append({"from": "summarize", "to": "gone"})
    doc["finish"] = ["summarize", "missing"]
    issues = issues_of(doc)
    assert [i.path for i in issues] == ["nodes[0].inputs.prompt", "nodes[1].output_key", "edges[1].to", "finish[1]"]
    with pytest.raises(WorkflowError) as caught:
        compile_workflow(doc)
    assert str(caught.value).startswith("Invalid workflow: At node 'draft' (nodes[0].inputs.prompt)")
    assert caught.value.issues[0].to_dict() == {
        "node": "draft", "path": "nodes[0].inputs.prompt", "message": issues[0].message, "detail": str(issues[0])}


def test_not_an_object_is_refused():
    issue = only_issue(["not", "a", "workflow"])
    assert (issue.node, issue.path, issue.message) == (None, "$", "a workflow must be a JSON object")


def test_validation_does_not_change_the_document():
    doc = base()
    snapshot = copy.deepcopy(doc)
    validate_workflow(doc)
    assert doc == snapshot


def test_a_condition_whose_every_route_stays_in_the_loop_has_no_exit():
    doc = loop_doc([{"from": "write", "to": "check"}, {"from": "check", "to": "gate"}])
    doc["nodes"].append({"id": "gate", "type": "condition", "config": {
        "key": "review", "cases": [{"op": "contains", "value": "ok", "goto": "check"}], "default": "write"}})
    issue = only_issue(doc)
    assert issue.path == "nodes[0]" and "the loop through 'write' → 'check' → 'gate' has no exit" in issue.message


def chain(length: int, *, back_to_start: bool) -> dict:
    nodes = [{"id": f"n{i}", "type": "llm", "inputs": {"prompt": "Go on from {text}"}, "output_key": "text"}
             for i in range(length)]
    edges = [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(length - 1)]
    if back_to_start:
        edges.append({"from": f"n{length - 1}", "to": "n0"})
    return wf(nodes, {"text": "string"}, edges, **({} if back_to_start else {"finish": [f"n{length - 1}"]}))


def test_a_thousand_node_workflow_is_checked_without_recursion():
    # The loop check walked the graph recursively: 1,000 nodes in a row exhausted Python's recursion limit (a 500).
    validate_workflow(chain(1000, back_to_start=False))
    issue = only_issue(chain(1000, back_to_start=True))
    assert (issue.node, issue.path) == ("n0", "nodes[0]") and "has no exit" in issue.message


@pytest.mark.parametrize(("config", "path", "words"), [
    ({"rule": "rank", "panel_size": 2}, "config.rule", "needs a panel of at least 3"),
    ({"rule": "vote", "answer_rule": "regex:("}, "config.answer_rule", "not a valid regular expression"),
    ({"answer_rule": "number"}, "config.answer_rule", "it needs rule 'vote'"),
])
def test_a_debate_nodes_rule_is_checked(config, path, words):
    document = {"version": 1, "name": "rules", "state": {"input": {"type": "string"}, "out": {"type": "string"}},
                "nodes": [{"id": "d", "type": "debate", "config": config, "output_key": "out"}], "entry": "d",
                "finish": ["d"]}
    issue = only_issue(document)
    assert (issue.node, issue.path) == ("d", f"nodes[0].{path}") and words in issue.message
