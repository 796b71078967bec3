"""The JSON an answer must be: OpenAI's `response_format` (`json_object`, `json_schema` with `strict`), checked once
where a request names it, told to each endpoint in its own dialect, and held against the answer.

    fmt = AnswerFormat.from_request({"type": "json_schema", "json_schema": {"name": "event", "schema": {...}}})
    fmt.problem('{"name": 3}')   # -> 'at $.name: 3 is not of type "string"' (None when the answer conforms)

Every JSON Schema a request carries (a format's, a tool's parameters) is checked here too (`check_schema`), within
bounds (`core.limits`: subschemas, properties, enum values, pattern length), before any model is called: its
references stay inside it (nothing is fetched) and never loop without reaching into the answer (`{"allOf": [{"$ref":
"#"}]}` could check no answer), and its `pattern`s compile. Schemas are checked and answers validated by
jsonschema-rs (Rust), whose patterns run on Rust's `regex` engine: linear in the text, no backtracking, so no pattern
and answer can hold a worker (a pattern it cannot compile, with lookaround or a backreference, is refused naming
it). Checking a large schema is still CPU work: callers run `check_schema` off the event loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import unquote

import jsonschema_rs
from langchain_core.exceptions import OutputParserException
from langchain_core.output_parsers import PydanticOutputParser

from parley.core.limits import (
    MAX_PATTERN_CHARS,
    MAX_SCHEMA_ENUM_VALUES,
    MAX_SCHEMA_PROPERTIES,
    MAX_SCHEMA_SUBSCHEMAS,
    MAX_TOOL_NAME_CHARS,
)

# Validation errors an answer's problem names (the first ones): enough to repair it, short to read.
MAX_PROBLEMS = 3
NAME = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_TOOL_NAME_CHARS}}}$")

StructuredMethod = Literal["json_schema", "json_object_schema", "function_calling"]

# Keywords whose values are data, not subschemas: never walked for references or patterns.
_DATA = frozenset({"const", "enum", "default", "examples"})
# Keywords whose subschemas apply to the same value as the schema holding them (a loop through these alone never
# ends); the others (`properties`, `items`, ...) reach into the value, so recursion through them ends with it.
_IN_PLACE = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "$ref",
                       "$dynamicRef", "$recursiveRef"})
_REFS = ("$ref", "$dynamicRef", "$recursiveRef")
# The drafts a schema may name in `$schema` (none: 2020-12); any other would have to be fetched, and nothing is.
DRAFTS = ("https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema",
          "http://json-schema.org/draft-07/schema", "http://json-schema.org/draft-06/schema",
          "http://json-schema.org/draft-04/schema")
# Regex options of every validator: Rust's `regex` crate (no backtracking), its compiled size bounded.
_REGEX = jsonschema_rs.RegexOptions(size_limit=8 << 20, dfa_size_limit=8 << 20)


def _no_fetching(uri: str) -> Any:
    raise ValueError(f"{uri} is outside the schema; only references within it (#...) are followed")


def _validator(schema: dict[str, Any]) -> Any:
    return jsonschema_rs.validator_for(schema, pattern_options=_REGEX, retriever=_no_fetching)


@lru_cache(maxsize=256)
def _cached_validator(text: str) -> Any:
    return _validator(json.loads(text))


def _pointer(ref: str) -> str:
    """The JSON pointer of a local reference `#/a/b` (`#` is the root), its escapes undone."""
    return unquote(ref[1:])


def _walk(schema: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every subschema of `schema` by JSON pointer, and the problems of its size, references and patterns."""
    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    properties = enum_values = 0
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack and not problems:
        node, where = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{where}/{i}") for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        found[where] = node
        if len(found) > MAX_SCHEMA_SUBSCHEMAS:
            problems.append(f"holds more than {MAX_SCHEMA_SUBSCHEMAS} subschemas")
            break
        if isinstance(node.get("properties"), dict):
            properties += len(node["properties"])
        if isinstance(node.get("enum"), list):
            enum_values += len(node["enum"])
        if properties > MAX_SCHEMA_PROPERTIES:
            problems.append(f"holds more than {MAX_SCHEMA_PROPERTIES} properties")
        if enum_values > MAX_SCHEMA_ENUM_VALUES:
            problems.append(f"holds more than {MAX_SCHEMA_ENUM_VALUES} enum values")
        patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            patterns += list(node["patternProperties"])
        problems += [f"a pattern at #{where} is {len(p)} characters long; at most {MAX_PATTERN_CHARS} are accepted"
                     for p in patterns if len(p) > MAX_PATTERN_CHARS]
        draft = node.get("$schema")
        if where and draft is not None and (not isinstance(draft, str) or draft.rstrip("#") not in DRAFTS):
            problems.append(f"names an unknown draft in $schema at #{where} ({draft!r})")
        for key in _REFS:
            ref = node.get(key)
            if isinstance(ref, str) and not ref.startswith("#"):
                problems.append(f"{key} {ref!r} at #{where} points outside the schema; only references within it "
                                "(#...) are followed")
        for key, value in node.items():
            if key not in _DATA and isinstance(value, dict | list):
                stack.append((value, f"{where}/{key.replace('~', '~0').replace('/', '~1')}"))
    return found, problems


def _target(ref: str, found: dict[str, dict[str, Any]]) -> str | None:
    """The pointer a local reference names: `#/a/b`, or an anchor `#name` (`$anchor`, `$dynamicAnchor`)."""
    if ref == "#" or ref.startswith("#/"):
        pointer = _pointer(ref)
        return pointer if pointer in found else None
    name = ref[1:]
    return next((where for where, node in found.items()
                 if name in (node.get("$anchor"), node.get("$dynamicAnchor"))), None)


def _in_place_loop(found: dict[str, dict[str, Any]]) -> list[str] | None:
    """A chain of subschemas that apply to the same value and lead back to its start, or None when there is none."""
    edges: dict[str, list[str]] = {}
    for where, node in found.items():
        nxt = []
        for key in _IN_PLACE:
            value = node.get(key)
            if key in _REFS:
                if isinstance(value, str) and (target := _target(value, found)) is not None:
                    nxt.append(target)
            elif isinstance(value, dict):
                nxt += [f"{where}/{key}"] if key != "dependentSchemas" else [
                    f"{where}/{key}/{name}" for name in value]
            elif isinstance(value, list):
                nxt += [f"{where}/{key}/{i}" for i in range(len(value))]
        edges[where] = [n for n in nxt if n in found]
    state: dict[str, int] = {}  # 1 on the path being walked, 2 done
    for start in found:
        if state.get(start):
            continue
        path, iters = [start], [iter(edges[start])]
        state[start] = 1
        while path:
            step = next(iters[-1], None)
            if step is None:
                state[path.pop()] = 2
                iters.pop()
            elif state.get(step) == 1:
                return [*path[path.index(step):], step]
            elif not state.get(step):
                state[step] = 1
                path.append(step)
                iters.append(iter(edges[step]))
    return None


def check_schema(schema: Any, where: str) -> None:
    """Refuse what is not a usable JSON Schema object (by its `$schema`'s draft, else 2020-12), naming `where` it was:
    too large, a reference outside it or looping in place, a pattern that cannot be compiled, or no valid schema.

    Raises:
        ValueError: the first problem found, naming where.
    """
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be a JSON Schema object")
    draft = schema.get("$schema")
    if draft is not None and (not isinstance(draft, str) or draft.rstrip("#") not in DRAFTS):
        raise ValueError(f"{where}.$schema must name a JSON Schema draft ({', '.join(DRAFTS)}), not {draft!r}")
    found, problems = _walk(schema)
    if problems:
        raise ValueError(f"{where} {problems[0]}")
    loop = _in_place_loop(found)
    if loop is not None:
        chain = " -> ".join("#" + step for step in loop)
        raise ValueError(f"{where} refers to itself without reaching into the answer ({chain}): no answer could "
                         "ever be checked against it")
    try:
        jsonschema_rs.meta.validate(schema)
        _validator(schema)
    except jsonschema_rs.ValidationError as exc:
        path = "".join(f"[{p!r}]" for p in exc.instance_path)
        message = exc.message.split("\n", 1)[0]
        raise ValueError(f"{where} is not a valid JSON Schema: {message} (at {where}{path})") from None
    except (ValueError, jsonschema_rs.ReferencingError) as exc:  # a reference that resolves to nothing
        raise ValueError(f"{where} is not a valid JSON Schema: {str(exc).splitlines()[0]}") from None


# What a model whose endpoint constrains its sampling to a schema, without showing it the schema (llama.cpp's
# grammar), is told of the fields it fills (`Provider.schema_in_prompt`).
SCHEMA_NOTE = "Answer with one JSON object with these fields:\n{fields}"


# The most schemas a note describes for one field: a schema may refer to itself (a list of lists of ...), or its
# $defs to each other many times over, and would otherwise be described without end.
NOTE_PARTS = 20


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(schema, dict):  # `true` (anything) or `false` (nothing): described as any value
        return {}
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part, {}) if isinstance(target, dict) else {}
    return target if isinstance(target, dict) else {}


def _kind(schema: Any, root: dict[str, Any], parts: list[int]) -> str:
    """A few words on the values `schema` admits: `text of at most 120 characters`, `one of "A", "B"`, ...
    (`parts` counts down the schemas a note may still describe, see `NOTE_PARTS`)."""
    if parts[0] <= 0:
        return "…"
    parts[0] -= 1
    schema = _resolve(schema, root)
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if options := schema.get("anyOf") or schema.get("oneOf"):
        return " or ".join(_kind(o, root, parts) for o in options if isinstance(o, dict))
    kind = schema.get("type")
    if kind == "array":
        most = f" (at most {schema['maxItems']})" if "maxItems" in schema else ""
        return f"a list{most} of {_kind(schema.get('items') or {}, root, parts)}"
    if kind == "object" or "properties" in schema:
        keys = ", ".join(json.dumps(k) for k in schema.get("properties") or {})
        return f"an object with {keys}" if keys else "an object"
    if kind == "string":
        return f"text of at most {schema['maxLength']} characters" if "maxLength" in schema else "text"
    return {"integer": "a whole number", "number": "a number", "boolean": "true or false", "null": "null"}.get(
        kind if isinstance(kind, str) else "", "any value")


def schema_note(schema: dict[str, Any]) -> str:
    """`SCHEMA_NOTE` for `schema`: each top-level field, what it holds and its description, one line each."""
    root = _resolve(schema, schema)
    lines = []
    for name, field in (root.get("properties") or {}).items():
        if isinstance(field, dict):
            about = field.get("description") or _resolve(field, schema).get("description")
            kind = _kind(field, schema, [NOTE_PARTS])
            lines.append(f"- {json.dumps(name)}: {kind}" + (f". {about}" if about else ""))
    return SCHEMA_NOTE.format(fields="\n".join(lines) or "- any fields")


def cap_strings(schema: Any, most: int) -> Any:
    """`schema` with every string it admits that has no bound of its own (`maxLength`, `enum`, `const`, `format`)
    held to `most` characters: what a grammar-constrained endpoint is sent (`Provider.json_string_cap`)."""
    if isinstance(schema, list):
        return [cap_strings(item, most) for item in schema]
    if not isinstance(schema, dict):
        return schema
    capped = {key: _cap_named(value, most) if key in _SCHEMA_MAPS else
              cap_strings(value, most) if key not in ("enum", "const", "default", "examples") else value
              for key, value in schema.items()}
    kinds = schema.get("type")
    if (kinds == "string" or (isinstance(kinds, list) and "string" in kinds)) and not (
            {"maxLength", "enum", "const", "format"} & set(schema)):
        capped["maxLength"] = most
    return capped


# Keywords whose value maps names to schemas: a property may be called "default" or "enum" and is a schema all the
# same (read as the keyword, its strings went uncapped).
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _cap_named(schemas: Any, most: int) -> Any:
    if not isinstance(schemas, dict):
        return cap_strings(schemas, most)
    return {name: cap_strings(schema, most) for name, schema in schemas.items()}


def json_path(path: Any) -> str:
    """A validation error's place in the answer, as `$.field[0].name`."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@dataclass(frozen=True)
class AnswerFormat:
    """The JSON a final answer must be: any JSON object (`json_object`), or one valid against `schema`
    (`json_schema`; `strict` is passed on to the endpoint, and Parley checks every answer either way)."""

    kind: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    name: str = "answer"
    strict: bool | None = None
    description: str | None = None

    @classmethod
    def from_request(cls, response_format: Any) -> AnswerFormat | None:
        """The format a request's `response_format` asks for (None for none, or `{"type": "text"}`).

        Raises:
            ValueError: not one of OpenAI's shapes, a bad name, or a schema that is no JSON Schema.
        """
        if response_format is None:
            return None
        if not isinstance(response_format, dict):
            raise ValueError("response_format must be an object such as {\"type\": \"json_object\"}")
        kind = response_format.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            return cls("json_object")
        if kind != "json_schema":
            raise ValueError(f"response_format.type must be 'text', 'json_object' or 'json_schema', not {kind!r}")
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            raise ValueError("response_format.json_schema must be an object: {\"name\", \"schema\", \"strict\"?}")
        name = spec.get("name", "answer")
        if not isinstance(name, str) or not NAME.match(name):
            raise ValueError(f"response_format.json_schema.name must be 1-{MAX_TOOL_NAME_CHARS} letters, digits, "
                             f"'_' or '-', not {name!r}")
        strict, description, schema = spec.get("strict"), spec.get("description"), spec.get("schema")
        if strict is not None and not isinstance(strict, bool):
            raise ValueError("response_format.json_schema.strict must be true or false")
        if description is not None and not isinstance(description, str):
            raise ValueError("response_format.json_schema.description must be a string")
        if schema is not None:
            check_schema(schema, "response_format.json_schema.schema")
        return cls("json_schema", schema, name, strict, description)

    @classmethod
    def load(cls, stored: dict[str, Any] | None) -> AnswerFormat | None:
        """The format of a stored `response_format` (checked when the request came in, so not again)."""
        if stored is None or stored.get("type") in (None, "text"):
            return None
        if stored["type"] == "json_object":
            return cls("json_object")
        spec = stored["json_schema"]
        return cls("json_schema", spec.get("schema"), spec.get("name", "answer"), spec.get("strict"),
                   spec.get("description"))

    def dump(self) -> dict[str, Any]:
        """OpenAI's `response_format` for this format."""
        if self.kind == "json_object":
            return {"type": "json_object"}
        spec: dict[str, Any] = {"name": self.name}
        for key, value in (("description", self.description), ("schema", self.schema), ("strict", self.strict)):
            if value is not None:
                spec[key] = value
        return {"type": "json_schema", "json_schema": spec}

    @property
    def key(self) -> str:
        """A stable text of the format (a cache key)."""
        return json.dumps(self.dump(), sort_keys=True)

    def __hash__(self) -> int:  # its fields hold dicts: hashed by its text, so it can key a cache
        return hash(self.key)

    def request_field(self, method: StructuredMethod, string_cap: int | None = None) -> dict[str, Any]:
        """The `response_format` an endpoint of structured-output dialect `method` (`Provider.structured_method`)
        is sent: OpenAI's as it is, or llama.cpp's grammar mode (`{"type": "json_object", "schema"}`), its unbounded
        strings held to `string_cap` characters (`cap_strings`)."""
        if method == "json_object_schema":
            if self.schema is None:
                return {"type": "json_object"}
            return {"type": "json_object",
                    "schema": cap_strings(self.schema, string_cap) if string_cap else self.schema}
        return self.dump()

    def schema_text(self) -> str:
        """The schema as a model reads it (compact JSON), or a plain description for any object."""
        if self.schema is None:
            return "any JSON object"
        return json.dumps(self.schema, ensure_ascii=False, separators=(",", ":"))

    def problem(self, text: str) -> str | None:
        """Why `text` is not an answer in this format (a sentence naming where), or None when it is."""
        try:
            value = json.loads(text)
        except RecursionError:  # nested past Python's recursion limit: no ValueError says so
            return "the answer is not valid JSON: it nests too deep to be read"
        except ValueError as exc:
            return f"the answer is not valid JSON: {exc}"
        if self.schema is None:
            return None if isinstance(value, dict) else f"the answer is JSON but not an object: {text[:80]}"
        errors = []
        try:  # a format's schema was checked when the request came in (`check_schema`); this guards any other
            validator = _cached_validator(json.dumps(self.schema, sort_keys=True))
            for error in validator.iter_errors(value):
                errors.append(f"at {json_path(error.instance_path)}: {error.message}")
                if len(errors) == MAX_PROBLEMS:
                    break
        except (ValueError, jsonschema_rs.ReferencingError) as exc:
            return f"the answer cannot be checked against the schema ({str(exc).splitlines()[0][:200]})"
        return "; ".join(errors) or None


class StructuredAnswerParser(PydanticOutputParser):
    """The parser of a grammar-constrained endpoint's structured answer (`json_object_schema`): an answer it cannot
    read is always an `OutputParserException`, so the node counts it unreadable (retried, then its fallback).

    langchain's parser lets two of `json.loads`'s own errors through: RecursionError (nesting past Python's limit)
    and ValueError (an integer of more than 4300 digits, a small model repeating a digit to its token cap); either
    would fail the run.
    """

    def parse_result(self, result: list[Any], *, partial: bool = False) -> Any:
        try:
            return super().parse_result(result, partial=partial)
        except OutputParserException:
            raise
        except (RecursionError, ValueError) as exc:
            text = result[0].text if result else ""
            raise OutputParserException(f"Invalid json output: {str(exc)[:200]}", llm_output=text) from exc
