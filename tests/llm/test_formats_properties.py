"""The JSON an answer must be holds for any schema a client sends and any text a model answers: a problem is None or a
sentence (never an exception), a grammar's schema bounds every string it admits and stays a schema, a schema note is
written for any schema, and a structured answer that cannot be read is an OutputParserException (llm/formats.py)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from langchain_core.exceptions import OutputParserException

from parley.graphs.roundtable.steps import MemoryNotes, StatedPosition, SynthesisDraft
from parley.llm.formats import AnswerFormat, StructuredAnswerParser, cap_strings, check_schema, schema_note
from parley.nodes.judge import Judgement, pick_schema
from parley.nodes.rank import ranking_schema
from parley.nodes.select_opponent import OpponentProfile
from tests.support.strategies import PROPERTY, TIMES, deep_json, json_scalars, json_values, long_runs, strings, text

# Property names a schema keyword may be mistaken for, and any others.
names = st.one_of(st.sampled_from(["default", "enum", "const", "examples", "type", "format", "maxLength", "items"]),
                  strings(max_size=6))
leaves = st.one_of(
    st.booleans(),  # `true` admits anything, `false` nothing
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])}, optional={
        "maxLength": st.integers(0, 50), "format": st.just("date"), "description": strings(max_size=20),
        "multipleOf": st.sampled_from([0.1, 2, 0.5])}),
    st.just({"type": ["string", "null"]}),
    st.fixed_dictionaries({"enum": st.lists(json_scalars, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"const": json_scalars}),
    st.sampled_from([{"$ref": "#/$defs/D0"}, {"$ref": "#/$defs/D1"}, {"$ref": "#/$defs/missing"}]),
)
subschemas = st.recursive(leaves, lambda children: st.one_of(
    st.fixed_dictionaries({"type": st.just("array"), "items": children}, optional={"maxItems": st.integers(0, 5)}),
    st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(names, children, max_size=3)}),
    st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"oneOf": st.lists(children, min_size=1, max_size=3)}),
), max_leaves=8)
# A top-level object, its $defs free to refer to each other and to themselves (a tree, a list of lists ...).
schemas = st.builds(lambda props, d0, d1: {"type": "object", "properties": props, "$defs": {"D0": d0, "D1": d1}},
                    st.dictionaries(names, subschemas, max_size=4), subschemas, subschemas)
answers = st.one_of(text, long_runs, json_values.map(json.dumps),
                    st.builds(deep_json, json_values, TIMES, as_object=st.booleans()))

SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")


def every_subschema(schema):
    """Each schema within `schema` (itself included), by where JSON Schema puts them."""
    yield schema
    if not isinstance(schema, dict):
        return
    for key, value in schema.items():
        if key in SUBSCHEMA_LISTS and isinstance(value, list):
            children = value
        elif key in SUBSCHEMA_MAPS and isinstance(value, dict):
            children = list(value.values())
        elif key in SUBSCHEMAS:
            children = [value]
        else:
            continue
        for child in children:
            yield from every_subschema(child)


def admits_strings(schema) -> bool:
    kinds = schema.get("type") if isinstance(schema, dict) else None
    return kinds == "string" or (isinstance(kinds, list) and "string" in kinds)


@PROPERTY
@given(schema=schemas, most=st.integers(1, 500))
def test_a_grammars_schema_bounds_every_string_and_stays_a_schema(schema, most):
    try:
        check_schema(schema, "schema")
    except ValueError as exc:  # refused (a reference to nowhere or looping in place, text that is not UTF-8): named
        assert str(exc).startswith("schema ")
        return
    capped = cap_strings(schema, most)
    check_schema(capped, "capped")
    assert cap_strings(capped, most) == capped
    for sub in every_subschema(capped):
        if admits_strings(sub):
            assert {"maxLength", "enum", "const", "format"} & set(sub), sub
    # Nothing but those bounds was added: take them away and the schema is as sent.
    def uncapped(value, original):
        if isinstance(value, dict) and isinstance(original, dict):
            extra = {"maxLength"} if value.get("maxLength") == most and "maxLength" not in original else set()
            return {k: uncapped(v, original.get(k)) for k, v in value.items() if k not in extra}
        if isinstance(value, list) and isinstance(original, list) and len(value) == len(original):
            return [uncapped(v, o) for v, o in zip(value, original)]
        return value

    assert uncapped(capped, schema) == schema


@PROPERTY
@given(schema=schemas)
def test_a_schema_note_is_written_for_any_schema(schema):
    note = schema_note(schema)
    assert note.startswith("Answer with one JSON object") and len(note.splitlines()) == 1 + max(
        1, sum(isinstance(field, dict) for field in schema["properties"].values()))


@PROPERTY
@given(schema=st.one_of(st.none(), schemas), answer=answers)
def test_a_problem_is_none_or_a_sentence_never_an_exception(schema, answer):
    fmt = AnswerFormat("json_object") if schema is None else AnswerFormat("json_schema", schema)
    problem = fmt.problem(answer)
    assert problem is None or (isinstance(problem, str) and problem)
    assert fmt.problem(answer) == problem
    if problem is None:  # it is JSON, and conforms (by the reference validator, for a schema a request may send)
        value = json.loads(answer)
        if schema is None:
            assert isinstance(value, dict)
        elif accepted(schema):
            assert Draft202012Validator(schema).is_valid(value)


def accepted(schema) -> bool:
    try:
        check_schema(schema, "schema")
    except ValueError:
        return False
    return True


@PROPERTY
@given(request=st.one_of(json_values, st.fixed_dictionaries({"type": st.sampled_from(["json_schema", "json_object"]),
                                                             "json_schema": json_values | st.fixed_dictionaries(
                                                                 {"name": strings(max_size=70), "schema": json_values},
                                                                 optional={"strict": json_values})})))
def test_a_response_format_is_read_or_refused_with_a_value_error(request):
    try:
        fmt = AnswerFormat.from_request(request)
    except ValueError as exc:
        assert str(exc)
        return
    assert fmt is None or AnswerFormat.load(fmt.dump()) == fmt


SCHEMAS = [StatedPosition, SynthesisDraft, MemoryNotes, Judgement, OpponentProfile, ranking_schema("ABC"),
           pick_schema("AB")]


@PROPERTY
@given(schema=st.sampled_from(SCHEMAS), answer=answers)
def test_a_structured_answer_is_read_or_is_an_output_parser_exception(schema, answer):
    # The parser of a grammar-constrained endpoint's answer (`json_object_schema`, llama.cpp), as the factory builds
    # it: anything else it raised would fail the run instead of counting as an unreadable answer.
    parser = StructuredAnswerParser(pydantic_object=schema)
    try:
        value = parser.parse(answer)
    except OutputParserException:
        return
    assert isinstance(value, schema)
