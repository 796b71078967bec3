"""Who is calling (`Principal`), and who may see and stop each kind of record: one rule per kind, applied by the
mode's own routes and by `/v1/runs`.

A key uses a kind of route (or MCP tool) when it carries its scope (`check_scope`): an `admin` key carries every
scope, and a `readonly` key reads with any but creates, runs or deletes nothing.

A run of a kind is shown to a key of its workspace that carries the kind's scope (a `readonly` key reads every
kind); a kind kept *private* is shown only to its owner (the key's user that started it) and to `admin` keys.
What a key may not see answers 404, the same as what does not exist. Only the owner or an `admin` key may
cancel a run. Routes never repeat these rules: they ask `may_see`, `may_cancel` or for a query (`owned`,
`visible_runs`) that the database filters with an index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from parley.runs import Caller
from parley.services.errors import Forbidden
from parley.store.keys import find_key


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's id, user, workspace and scopes."""

    key_id: str
    user: str
    workspace: str
    scopes: frozenset[str]

    @property
    def readonly(self) -> bool:
        return "readonly" in self.scopes

    def allows(self, scope: str) -> bool:
        """True when the key carries `scope` (an `admin` key carries every scope)."""
        return scope in self.scopes or "admin" in self.scopes

    @property
    def caller(self) -> Caller:
        """Who runs started with this key are for."""
        return Caller(user=self.user, workspace=self.workspace)


async def authenticate(db: AsyncDatabase, plaintext: str | None) -> Principal | None:
    """The caller a presented key stands for, or None for no key, an unknown one or a revoked one."""
    record = await find_key(db, plaintext=plaintext) if plaintext else None
    if record is None:
        return None
    return Principal(record["_id"], record["user"], record["workspace"], frozenset(record.get("scopes", [])))


@dataclass(frozen=True)
class Visibility:
    """The visibility rule of one kind of record."""

    scope: str  # the scope of the mode's own routes, which a key needs to see the kind at all
    private: bool  # shown to its owner and admin keys only (else to every key of the workspace with the scope)


RULES: dict[str, Visibility] = {
    "duel": Visibility(scope="debate", private=True),
    "panel": Visibility(scope="chat", private=True),
    "roundtable": Visibility(scope="conversations", private=False),
    "workflow": Visibility(scope="workflows", private=False),
}


def is_admin(principal: Principal) -> bool:
    return "admin" in principal.scopes


def check_scope(principal: Principal, scope: str | None, *, write: bool = False) -> None:
    """Let the key use `scope`, or raise.

    Args:
        principal: the caller.
        scope: the capability asked for (`debate`, `chat`, `conversations`, `workflows`); None for what every key
            may do (read the runs it may see; a write, such as a cancel, with a key that is not read-only).
        write: it creates, runs, stops or deletes something, which a `readonly` key may not do.

    Raises:
        Forbidden: `read_only_key` for a write with a read-only key, `scope_denied` for a key without the scope.
    """
    if write and principal.readonly and not is_admin(principal):
        raise Forbidden("This key is read-only", code="read_only_key")
    if scope is not None and not (principal.allows(scope) or (not write and principal.readonly)):
        raise Forbidden(f"This key lacks the '{scope}' scope", code="scope_denied")


def may_use(principal: Principal, scope: str | None, *, write: bool = False) -> bool:
    """Whether `check_scope` lets the key use `scope`."""
    try:
        check_scope(principal, scope, write=write)
    except Forbidden:
        return False
    return True


def readable_kinds(principal: Principal) -> list[str]:
    """The kinds whose records the key may see at all (some of them perhaps only its own)."""
    return [kind for kind, rule in RULES.items() if principal.allows(rule.scope) or principal.readonly]


def sees_all(principal: Principal, kind: str) -> bool:
    """Whether the key sees every record of `kind` in its workspace, not only its user's."""
    return not RULES[kind].private or is_admin(principal)


def owned(principal: Principal, kind: str) -> dict[str, Any]:
    """The query part restricting records of `kind` (with `workspace` and `user` fields) to those the key may see."""
    query: dict[str, Any] = {"workspace": principal.workspace}
    if not sees_all(principal, kind):
        query["user"] = principal.user
    return query


def may_see(principal: Principal, record: dict) -> bool:
    """Whether the key may see the run (or mode record) `record` of kind `record["kind"]`."""
    kind = record["kind"]
    if kind not in readable_kinds(principal) or record.get("workspace") != principal.workspace:
        return False
    return sees_all(principal, kind) or record.get("user") == principal.user


def may_cancel(principal: Principal, record: dict) -> bool:
    """Whether the key may stop the run: its owner or an admin key."""
    return is_admin(principal) or record.get("user") == principal.user


def visible_runs(principal: Principal, kinds: list[str]) -> dict[str, Any]:
    """The `runs` query of the key's workspace's runs of `kinds` that it may see (served by the indexes
    `workspace, createdAt` for the kinds it sees whole and `workspace, user, createdAt` for its own)."""
    kinds = [kind for kind in kinds if kind in readable_kinds(principal)]
    every = [kind for kind in kinds if sees_all(principal, kind)]
    own = [kind for kind in kinds if not sees_all(principal, kind)]
    branches = ([{"kind": {"$in": every}}] if every else []) + (
        [{"user": principal.user, "kind": {"$in": own}}] if own else [])
    if not branches:
        return {"workspace": principal.workspace, "kind": {"$in": []}}
    if len(branches) == 1:
        return {"workspace": principal.workspace, **branches[0]}
    return {"workspace": principal.workspace, "$or": branches}
