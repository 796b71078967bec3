"""Templates over workflow state: `"Summarize {verdict} for {audience}"`, with dotted paths into values.

Pure helpers shared by the validator (which keys does a template read?) and the nodes (render it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from string import Formatter
from typing import Any

_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)*$")
_MISSING = object()


class TemplateError(ValueError):
    """A template that cannot be parsed."""


class MissingValue(LookupError):
    """A template reads a state key (or a field inside one) that has no value."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(detail)
        self.path = path


@dataclass(frozen=True)
class Placeholder:
    """One `{path:spec}` of a template; `key` is the state key the path starts with."""

    path: str
    spec: str

    @property
    def key(self) -> str:
        return self.path.split(".", 1)[0]


def parse_template(text: str) -> list[str | Placeholder]:
    """Split `text` into literal strings and placeholders; `{{` and `}}` are literal braces.

    Raises:
        TemplateError: unbalanced braces, an empty placeholder, a `!r`-style conversion, or a
            path that is not `key` or `key.field.0`.
    """
    try:
        parts = list(Formatter().parse(text))
    except ValueError as exc:
        raise TemplateError(f"bad template: {exc}") from exc
    out: list[str | Placeholder] = []
    for literal, field, spec, conversion in parts:
        if literal:
            out.append(literal)
        if field is None:
            continue
        if conversion:
            raise TemplateError(f"bad template: conversions such as '!{conversion}' are not supported")
        if not field:
            raise TemplateError("bad template: empty placeholder '{}' (write '{{}}' for literal braces)")
        if not _PATH.match(field):
            raise TemplateError(f"bad template: '{{{field}}}' is not a state key or a dotted path such as 'key.field'")
        out.append(Placeholder(field, spec or ""))
    return out


def template_keys(text: str) -> list[str]:
    """The state keys `text` reads, in order of first use."""
    seen: list[str] = []
    for part in parse_template(text):
        if isinstance(part, Placeholder) and part.key not in seen:
            seen.append(part.key)
    return seen


def check_path(path: str) -> None:
    """Raise TemplateError unless `path` is `key` or a dotted path into a key."""
    if not _PATH.match(path):
        raise TemplateError(f"'{path}' is not a state key or a dotted path such as 'key.field'")


def lookup(state: Mapping[str, Any], path: str, defaults: Mapping[str, Any]) -> Any:
    """Read `path` (`key.field.0`) from `state`, falling back to the key's declared default.

    Raises:
        MissingValue: the key has neither a value nor a default, or a field along the path is absent.
    """
    key, *fields = path.split(".")
    value = state.get(key, _MISSING)
    if value is _MISSING:
        value = defaults.get(key, _MISSING)
    if value is _MISSING:
        raise MissingValue(path, f"state key '{key}' has no value; pass it as input or give it a default")
    walked = key
    for field in fields:
        if isinstance(value, Mapping) and field in value:
            value = value[field]
        elif isinstance(value, list) and field.lstrip("-").isdigit() and -len(value) <= int(field) < len(value):
            value = value[int(field)]
        else:
            raise MissingValue(path, f"'{walked}' has no field '{field}' (reading '{path}')")
        walked += "." + field
    return value


def to_text(value: Any) -> str:
    """Render a state value inside text: strings as they are, None as nothing, anything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, default=str)


def render(text: str, state: Mapping[str, Any], defaults: Mapping[str, Any], *, raw: bool = False) -> Any:
    """Fill `text`'s placeholders from `state`.

    With `raw=True`, a template that is one bare placeholder (`"{profile}"`) yields the value itself,
    so an object or a number passes through unchanged; otherwise the result is always a string.
    """
    parts = parse_template(text)
    if raw and len(parts) == 1 and isinstance(parts[0], Placeholder) and not parts[0].spec:
        return lookup(state, parts[0].path, defaults)
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        value = lookup(state, part.path, defaults)
        out.append(format(value, part.spec) if part.spec else to_text(value))
    return "".join(out)
