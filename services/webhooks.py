"""Signed webhooks (`/v1/webhooks`): a workspace's admin subscribes receivers to run events, and every worker sends
the deliveries that are due (`WebhookSender`), signed as the Standard Webhooks specification says.

A subscription names a URL under one of the deployment's `PARLEY_WEBHOOK_URLS` (checked by the rules of every
outbound URL, `core.outbound`, when it is made or changed and again before each attempt), the events it wants
(`run.completed`, `run.failed`, `run.cancelled`, `run.waiting`) and, optionally, the kinds of run. Each delivery is
stored before the run's status is written (`runs.announce`), sent once that status is stored, with the headers `webhook-id` (the delivery's id, the
same on every attempt), `webhook-timestamp` and `webhook-signature` (`v1,<base64 HMAC-SHA256>` by every secret that
signs: the current one, and one rotated out during its grace), by the `standardwebhooks` package's signer. A 2xx
answer within `PARLEY_WEBHOOK_TIMEOUT` delivers it; anything else is retried, the wait doubling from
`PARLEY_WEBHOOK_RETRY_DELAY` up to an hour, until `PARLEY_WEBHOOK_ATTEMPTS` attempts have failed (then `failed`, and
an admin may replay it: the same id, attempts counted afresh).

A worker's slots are shared fairly: one workspace's deliveries hold at most `WEBHOOK_WORKSPACE_SHARE` of them, a
webhook whose receiver keeps timing out is backed off alone, and test pings are rate-limited (`WEBHOOK_TEST_RATE`).
The secrets are stored sealed (`core.sealing`), and a receiver's host is resolved and checked before each attempt,
the connection made to the address checked (`core.outbound.Reach`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
import time
from collections import Counter
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley.core.workers import WORKER
from parley.core import clock, outbound, sealing
from parley.core.limits import (
    MAX_WEBHOOK_ANSWER_BYTES,
    MAX_WEBHOOK_URL_CHARS,
    MAX_WEBHOOKS,
    WEBHOOK_LEASE_MARGIN_SECONDS,
    WEBHOOK_MAX_HOLD_SECONDS,
    WEBHOOK_MAX_RETRY_DELAY_SECONDS,
    WEBHOOK_MAX_SECRET_GRACE_SECONDS,
    WEBHOOK_SENDS_AT_ONCE,
    WEBHOOK_TEST_RATE,
    WEBHOOK_TIMEOUTS_BEFORE_BACKOFF,
    WEBHOOK_WORKSPACE_SHARE,
)
from parley.core.settings import Settings
from parley.runs.announce import EVENTS, readiness
from parley.services import access
from parley.services.access import Principal
from parley.services.backend import Backend
from parley.services.errors import Conflict, Forbidden, InvalidRequest, NotFound
from parley.store import webhooks as store

log = logging.getLogger("parley.webhooks")

Event = Literal["run.completed", "run.failed", "run.cancelled", "run.waiting"]
Kind = Literal["duel", "panel", "roundtable", "workflow"]
TEST_EVENT = "webhook.test"
SETTING = "PARLEY_WEBHOOK_URLS"
DEFAULT_GRACE_SECONDS = 24 * 3600
ANSWER_SHOWN_CHARS = 500  # of a receiver's answer, kept in the attempt's log

class _Fields(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WebhookCreate(_Fields):
    """A receiver to subscribe to the workspace's run events."""

    url: str = Field(min_length=1, max_length=MAX_WEBHOOK_URL_CHARS,
                     description="Where deliveries are POSTed; under one of the deployment's PARLEY_WEBHOOK_URLS.")
    events: list[Event] = Field(default_factory=lambda: list(EVENTS.values()), min_length=1, max_length=4,
                                description="The run events delivered (default: all four).")
    kinds: list[Kind] | None = Field(None, min_length=1, max_length=4,
                                     description="Only runs of these kinds (default: every kind).")
    description: str = Field("", max_length=500, description="A note for the workspace's admins.")


class WebhookUpdate(_Fields):
    """A change to a subscription; fields left out keep their value (`kinds: null`: every kind again)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    url: str | None = Field(None, min_length=1, max_length=MAX_WEBHOOK_URL_CHARS)
    events: list[Event] | None = Field(None, min_length=1, max_length=4)
    kinds: list[Kind] | None = Field(None, min_length=1, max_length=4)
    description: str | None = Field(None, max_length=500)
    active: bool | None = Field(None, description="False: no delivery is stored for it until it is true again.")


class SecretRotation(_Fields):
    """How long the secret rotated out goes on signing beside the new one."""

    grace_seconds: Annotated[int, Field(ge=0, le=WEBHOOK_MAX_SECRET_GRACE_SECONDS, alias="graceSeconds")] = \
        DEFAULT_GRACE_SECONDS

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def new_secret() -> str:
    """A fresh signing secret: `whsec_` and 32 random bytes in base64, as the specification's secrets are written."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _admin(principal: Principal) -> None:
    """Webhooks, their secrets' dates and their deliveries' payloads are for the workspace's `admin` keys alone (a
    `readonly` key, which reads other admin routes, does not read these)."""
    if not access.is_admin(principal):
        raise Forbidden("Webhooks are managed by the workspace's admin keys", code="scope_denied")


def _allowed_url(url: str, settings: Settings) -> str:
    """`url` in its normal form, once the deployment allows it.

    Raises:
        InvalidRequest: `webhook_url_not_allowed`, saying why.
    """
    try:
        normal = outbound.normalise_url(url)
    except ValueError as exc:
        raise InvalidRequest(f"This URL is not allowed: {exc}", code="webhook_url_not_allowed") from exc
    why = outbound.allowed_refusal(normal, settings.parley_webhook_urls, setting=SETTING, what="Webhooks")
    if why is not None:
        raise InvalidRequest(f"This URL is not allowed: {why}", code="webhook_url_not_allowed")
    return normal


def _sealer(settings: Settings) -> sealing.Sealer:
    """What seals the signing secrets at rest (`core.sealing`: PARLEY_ENCRYPTION_KEYS, or the key in PARLEY_HOME)."""
    return sealing.sealer(settings.parley_encryption_keys, settings.parley_home)


async def reseal_secrets(db: AsyncDatabase, settings: Settings) -> int:
    """Seal again, under the key that seals now (the first of PARLEY_ENCRYPTION_KEYS), every signing secret sealed
    by another key of the list or stored in clear before secrets were sealed; how many webhooks were. A secret that no
    listed key opens is left as it is (and logged). Each worker does it when it starts, so a key rotated in is the
    only one the database needs once they have all restarted."""
    cipher, count = _sealer(settings), 0
    async for doc in store.stale_seals(db, key=cipher.key):
        try:
            secrets = [{**{k: v for k, v in s.items() if k not in ("secret", "sealed", "key")},
                        **cipher.seal(cipher.open(s))} for s in doc.get("secrets") or []]
        except sealing.Unreadable as exc:
            log.warning("webhook %s: a signing secret could not be sealed again: %s", doc["_id"], exc)
            continue
        count += await store.reseal(db, doc=doc, secrets=secrets)
    return count


def _reach(settings: Settings) -> outbound.Reach:
    """Where a receiver's host may lead (`core.outbound.Reach`)."""
    return outbound.Reach(tuple(settings.parley_webhook_urls), SETTING, tuple(settings.parley_outbound_networks))


async def _reachable_url(url: str, settings: Settings) -> str:
    """`url` in its normal form, once the deployment allows it (`_allowed_url`) and its host leads to an address it
    may call (a name that does not resolve now is taken: it is resolved again, and checked, before each attempt).

    Raises:
        InvalidRequest: `webhook_url_not_allowed`, saying why.
    """
    normal = _allowed_url(url, settings)
    try:
        address, why = await outbound.reachable_address(normal, _reach(settings))
    except OSError:
        return normal
    if address is None:
        raise InvalidRequest(f"This URL is not allowed: {why}", code="webhook_url_not_allowed")
    return normal


async def _webhook_or_404(db: AsyncDatabase, principal: Principal, webhook_id: str) -> dict[str, Any]:
    _admin(principal)
    doc = await store.get_webhook(db, workspace=principal.workspace, webhook_id=webhook_id)
    if doc is None:
        raise NotFound("Webhook not found", code="webhook_not_found")
    return doc


async def create_webhook(db: AsyncDatabase, settings: Settings, *, principal: Principal,
                         body: WebhookCreate) -> dict[str, Any]:
    """Subscribe a receiver; its signing secret is in the answer, and never shown again.

    Raises:
        Forbidden: not an admin key.
        InvalidRequest: the URL is not allowed (`webhook_url_not_allowed`), or the workspace has `MAX_WEBHOOKS`.
    """
    _admin(principal)
    url = await _reachable_url(body.url, settings)
    if await store.count_webhooks(db, workspace=principal.workspace) >= MAX_WEBHOOKS:
        raise InvalidRequest(f"A workspace subscribes at most {MAX_WEBHOOKS} webhooks", code="too_many_webhooks")
    secret = new_secret()
    fields = {"url": url, "events": list(dict.fromkeys(body.events)),
              "kinds": list(dict.fromkeys(body.kinds)) if body.kinds else None, "description": body.description}
    doc = await store.insert_webhook(db, workspace=principal.workspace, fields=fields,
                                     secret=_sealer(settings).seal(secret))
    return store.public_webhook(doc, secret=secret)


async def list_webhooks(db: AsyncDatabase, *, principal: Principal) -> dict[str, Any]:
    _admin(principal)
    return {"data": [store.public_webhook(d) for d in await store.list_webhooks(db, workspace=principal.workspace)]}


async def get_webhook(db: AsyncDatabase, *, principal: Principal, webhook_id: str) -> dict[str, Any]:
    return store.public_webhook(await _webhook_or_404(db, principal, webhook_id))


async def update_webhook(db: AsyncDatabase, settings: Settings, *, principal: Principal, webhook_id: str,
                         body: WebhookUpdate) -> dict[str, Any]:
    await _webhook_or_404(db, principal, webhook_id)
    fields = body.model_dump(exclude_unset=True)
    if "url" in fields:
        if fields["url"] is None:
            raise InvalidRequest("url: a webhook needs one", code="invalid_request")
        fields["url"] = await _reachable_url(fields["url"], settings)
    for name in ("events", "description", "active"):
        if name in fields and fields[name] is None:
            raise InvalidRequest(f"{name}: may not be null", code="invalid_request")
    if fields.get("events"):
        fields["events"] = list(dict.fromkeys(fields["events"]))
    if fields.get("kinds"):
        fields["kinds"] = list(dict.fromkeys(fields["kinds"]))
    doc = await store.update_webhook(db, workspace=principal.workspace, webhook_id=webhook_id, fields=fields)
    if doc is None:
        raise NotFound("Webhook not found", code="webhook_not_found")
    return store.public_webhook(doc)


async def delete_webhook(db: AsyncDatabase, *, principal: Principal, webhook_id: str) -> None:
    _admin(principal)
    if not await store.delete_webhook(db, workspace=principal.workspace, webhook_id=webhook_id):
        raise NotFound("Webhook not found", code="webhook_not_found")


async def rotate_secret(db: AsyncDatabase, settings: Settings, *, principal: Principal, webhook_id: str,
                        body: SecretRotation) -> dict[str, Any]:
    """Give a subscription a new secret (in the answer, shown once); the secrets that signed until now go on
    signing beside it for `graceSeconds` (0: they stop at once), so a receiver can move to the new one.

    Raises:
        Conflict: another rotation of it was stored at the same moment (`webhook_rotating`): ask again.
    """
    await _webhook_or_404(db, principal, webhook_id)
    secret = new_secret()
    doc = await store.rotate_secret(db, workspace=principal.workspace, webhook_id=webhook_id,
                                    secret=_sealer(settings).seal(secret),
                                    grace_until=clock.now() + timedelta(seconds=body.grace_seconds))
    if doc is None:
        raise Conflict("The webhook's secret was being rotated at the same moment; ask again",
                       code="webhook_rotating")
    return store.public_webhook(doc, secret=secret)


async def test_webhook(backend: Backend, *, principal: Principal, webhook_id: str) -> dict[str, Any]:
    """Store a `webhook.test` delivery to the subscription (whatever events it subscribed to), sent like any.

    Raises:
        RateLimited: the workspace asked for `WEBHOOK_TEST_RATE` pings already (`rate_limited`, with the seconds
            to wait): a ping is free to ask for, its delivery is not free to send.
        Conflict: the webhook is not active (`webhook_inactive`).
    """
    db = backend.db
    doc = await _webhook_or_404(db, principal, webhook_id)
    await backend.admit(WEBHOOK_TEST_RATE, "webhooks:test", principal.workspace,
                        message=f"A workspace may ask for {WEBHOOK_TEST_RATE.replace('/', ' test pings per ')}")
    if not doc.get("active", True):
        raise Conflict("The webhook is not active", code="webhook_inactive")
    event = {"type": TEST_EVENT, "timestamp": clock.iso(clock.now()), "data": {"webhookId": webhook_id}}
    ids = await store.enqueue(db, workspace=principal.workspace, event=TEST_EVENT, kind=None, run_id=None,
                              body=_json(event), webhook_id=webhook_id)
    return await get_delivery(db, principal=principal, delivery_id=ids[0])


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def list_deliveries(db: AsyncDatabase, *, principal: Principal, webhook_id: str | None = None,
                          status: str | None = None, limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
    """One page of the workspace's deliveries (of one webhook, of one status), newest first: `{data, nextCursor}`.

    Raises:
        NotFound: `webhook_id` names no webhook of the workspace.
        InvalidRequest: `cursor` is not one this API gave (`invalid_cursor`).
    """
    if webhook_id is not None:
        await _webhook_or_404(db, principal, webhook_id)
    _admin(principal)
    try:
        rows, next_cursor = await store.list_deliveries(db, workspace=principal.workspace, webhook_id=webhook_id,
                                                        status=status, cursor=cursor, limit=limit)
    except ValueError as exc:
        raise InvalidRequest(str(exc), code="invalid_cursor") from exc
    return {"data": [store.public_delivery(r) for r in rows], "nextCursor": next_cursor}


async def get_delivery(db: AsyncDatabase, *, principal: Principal, delivery_id: str) -> dict[str, Any]:
    _admin(principal)
    doc = await store.get_delivery(db, workspace=principal.workspace, delivery_id=delivery_id)
    if doc is None:
        raise NotFound("Delivery not found", code="delivery_not_found")
    return store.public_delivery(doc)


async def replay_delivery(db: AsyncDatabase, *, principal: Principal, delivery_id: str) -> dict[str, Any]:
    """Send a delivered or failed delivery again: the same id and body (a receiver that deduplicates on
    `webhook-id` ignores it, as it should a retry), a fresh signature and timestamp, its attempts counted afresh.

    Raises:
        NotFound: no such delivery in the workspace.
        Conflict: it is pending already (`delivery_pending`): it will be sent; or it is void (`delivery_void`):
            the event it announced never happened.
    """
    current = await get_delivery(db, principal=principal, delivery_id=delivery_id)
    if current["status"] == store.PENDING:
        raise Conflict("This delivery is pending: it will be sent", code="delivery_pending")
    if current["status"] == store.VOID:
        raise Conflict("This delivery is void: the event it announced never happened", code="delivery_void")
    doc = await store.replay(db, workspace=principal.workspace, delivery_id=delivery_id)
    if doc is None:
        raise NotFound("Delivery not found", code="delivery_not_found")
    return store.public_delivery(doc)


# --- sending -----------------------------------------------------------------------------------------------------


def signature(secrets_: list[str], *, msg_id: str, timestamp: Any, body: str) -> str:
    """The `webhook-signature` header: `v1,<signature>` by each of `secrets_`, space-separated (the specification's
    way to sign with more than one secret while a receiver moves from one to the next)."""
    from standardwebhooks import Webhook

    return " ".join(Webhook(s).sign(msg_id=msg_id, timestamp=timestamp, data=body) for s in secrets_)


def hold_delay(settings: Settings, holds: int) -> float:
    """Seconds before a delivery claimed `holds` times too early (its run had not yet stored the status it
    announces) is looked at again: from `PARLEY_WEBHOOK_POLL`, doubling, up to `WEBHOOK_MAX_HOLD_SECONDS` (a run
    whose worker died is resumed once its lease runs out)."""
    return min(settings.parley_webhook_poll * 2 ** max(holds - 1, 0), WEBHOOK_MAX_HOLD_SECONDS)


def retry_delay(settings: Settings, tries: int) -> float:
    """Seconds before the next attempt of a delivery that has failed `tries` times in a row (its round)."""
    return min(settings.parley_webhook_retry_delay * 2 ** (tries - 1), WEBHOOK_MAX_RETRY_DELAY_SECONDS)


class WebhookSender:
    """Send the webhook deliveries that are due, from one worker: every `PARLEY_WEBHOOK_POLL` seconds it claims up
    to `WEBHOOK_SENDS_AT_ONCE` of them, at most `WEBHOOK_WORKSPACE_SHARE` of one workspace under way at once, so that
    no workspace's queue or hanging receivers hold up another's (`store.webhooks.claim_due`, each held for an
    attempt's timeout and `WEBHOOK_LEASE_MARGIN_SECONDS`), sends each, and records the attempt; a webhook whose
    receiver keeps timing out is backed off (`_note_answer`). Started and stopped with the app (every
    worker runs one); a delivery it holds when it stops is handed back, due at once."""

    def __init__(self, db: AsyncDatabase, settings: Settings, *, worker: str | None = None) -> None:
        self.db, self.settings = db, settings
        self.worker = worker or WORKER
        self.lease = settings.parley_webhook_timeout + WEBHOOK_LEASE_MARGIN_SECONDS
        self._loop: asyncio.Task | None = None
        self._sending: dict[asyncio.Task, dict[str, Any]] = {}

    def start(self) -> None:
        """Start sending (first sealing again, under the current key, the signing secrets that another key of
        PARLEY_ENCRYPTION_KEYS sealed: `reseal_secrets`); not on a deployment that allows no receiver
        (`PARLEY_WEBHOOK_URLS` empty), where nothing could be sent: its worker asks nothing of `webhooks` or
        `webhook_deliveries` (a delivery stored before the setting was emptied waits, pending, until it is set
        again)."""
        if self._loop is None and self.settings.parley_webhook_urls:
            self._loop = asyncio.create_task(self._run(), name="webhook sender")

    async def stop(self) -> None:
        """Stop claiming; stop the attempts under way and hand their deliveries back."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None
        held = dict(self._sending)
        for task in held:
            task.cancel()
        if held:
            await asyncio.wait(held)
        for task, delivery in held.items():
            if task.cancelled():
                with contextlib.suppress(PyMongoError):
                    await store.release(self.db, delivery=delivery)

    async def _run(self) -> None:
        try:
            await reseal_secrets(self.db, self.settings)
        except PyMongoError as exc:  # sealed again at the next start; the secrets open meanwhile
            log.warning("webhook secrets could not be sealed again under the current key (%s)", exc)
        while True:
            free = WEBHOOK_SENDS_AT_ONCE - len(self._sending)
            claimed: list[dict[str, Any]] = []
            if free > 0:
                try:
                    busy = Counter(d["workspace"] for d in self._sending.values())
                    claimed = await store.claim_due(self.db, worker=self.worker, lease_seconds=self.lease, limit=free,
                                                    share=WEBHOOK_WORKSPACE_SHARE, busy=busy)
                except PyMongoError as exc:
                    log.warning("webhook deliveries could not be claimed (%s); trying again", exc)
            for delivery in claimed:
                task = asyncio.create_task(self._deliver(delivery), name=f"webhook {delivery['_id']}")
                self._sending[task] = delivery
                task.add_done_callback(lambda done: self._sending.pop(done, None))
            if not claimed or len(claimed) < free:
                await asyncio.sleep(self.settings.parley_webhook_poll)
            else:
                await asyncio.sleep(0)

    async def _deliver(self, delivery: dict[str, Any]) -> None:
        """Make one attempt of `delivery` and record it: delivered, due again after its backoff, or failed. A
        delivery whose run has not yet stored the status it announces is handed back for later, no attempt counted;
        one whose run ended otherwise is set `void`, never sent (`runs.announce.readiness`)."""
        try:
            verdict, why = await readiness(self.db, delivery)
            if verdict == "hold":
                holds = delivery.get("holds", 0) + 1
                await store.hold(self.db, delivery=delivery,
                                 next_at=clock.now() + timedelta(seconds=hold_delay(self.settings, holds)))
                return
            if verdict == "void":
                if await store.void(self.db, delivery=delivery, reason=why or "void"):
                    log.info("webhook delivery %s of %s is void: %s", delivery["_id"], delivery["event"], why)
                return
            webhook = await store.get_webhook(self.db, workspace=delivery["workspace"],
                                              webhook_id=delivery["webhookId"])
            if webhook is not None and (until := store.backed_off_until(webhook)) is not None:
                await store.hold(self.db, delivery=delivery, next_at=until)  # its receiver keeps timing out
                return
            attempt = await self.attempt(delivery, webhook)
            if webhook is not None:
                await self._note_answer(webhook, attempt)
            tries = delivery.get("tries", 0) + 1
            if attempt.get("statusCode") is not None and 200 <= attempt["statusCode"] < 300:
                status, next_at = store.DELIVERED, None
            elif attempt.get("final") or tries >= self.settings.parley_webhook_attempts:
                status, next_at = store.FAILED, None
            else:
                status, next_at = store.PENDING, clock.now() + timedelta(seconds=retry_delay(self.settings, tries))
            attempt.pop("final", None)
            await store.record_attempt(self.db, delivery=delivery, attempt=attempt, status=status, next_at=next_at)
            if status == store.FAILED:
                log.warning("webhook delivery %s to %s failed after %d attempts: %s", delivery["_id"],
                            delivery["webhookId"], tries, attempt.get("error"))
        except PyMongoError as exc:  # its lease runs out: it is sent again
            log.warning("webhook delivery %s: its attempt could not be recorded (%s)", delivery["_id"], exc)

    async def _note_answer(self, webhook: dict[str, Any], attempt: dict[str, Any]) -> None:
        """Keep count of the attempts in a row that `webhook`'s receiver let time out: from the
        `WEBHOOK_TIMEOUTS_BEFORE_BACKOFF`th, nothing more is sent to it for `retry_delay` of the timeouts past it
        (doubling), however many of its deliveries are due; an answer, whatever its status, ends the back-off. Its
        workspace's other webhooks are not held."""
        if (attempt.get("error") or "").startswith("timeout"):
            timeouts = await store.count_timeout(self.db, webhook_id=webhook["_id"])
            if timeouts >= WEBHOOK_TIMEOUTS_BEFORE_BACKOFF:
                wait = retry_delay(self.settings, timeouts - WEBHOOK_TIMEOUTS_BEFORE_BACKOFF + 1)
                await store.back_off(self.db, webhook_id=webhook["_id"], until=clock.now() + timedelta(seconds=wait))
                log.warning("webhook %s: its receiver timed out %d times in a row; nothing is sent to it for %g s",
                            webhook["_id"], timeouts, wait)
        elif attempt.get("statusCode") is not None and (webhook.get("timeouts") or webhook.get("backoffUntil")):
            await store.answered(self.db, webhook_id=webhook["_id"])

    async def attempt(self, delivery: dict[str, Any], webhook: dict[str, Any] | None) -> dict[str, Any]:
        """POST `delivery` to `webhook`'s receiver once, signed; the attempt as its log keeps it: `at`,
        `statusCode` (None when no answer came), `error` (a code and words, None for a 2xx), `durationMs`,
        `worker`, and `final` when no later attempt could do better (the webhook is gone or its URL refused)."""
        at = clock.now()
        entry: dict[str, Any] = {"at": at, "statusCode": None, "error": None, "durationMs": 0, "worker": self.worker}
        if webhook is None:
            return {**entry, "error": "webhook_deleted: the webhook was deleted", "final": True}
        if not webhook.get("active", True):
            return {**entry, "error": "webhook_inactive: the webhook was deactivated", "final": True}
        try:
            url = _allowed_url(webhook["url"], self.settings)
        except InvalidRequest as exc:
            return {**entry, "error": f"webhook_url_not_allowed: {exc.message}", "final": True}
        try:
            signing = [_sealer(self.settings).open(s) for s in store.live_secrets(webhook, at)]
        except sealing.Unreadable as exc:
            return {**entry, "error": f"secret_unreadable: the webhook's secret is {exc}"}
        headers = {"content-type": "application/json", "user-agent": "Parley-Webhooks",
                   "webhook-id": delivery["_id"], "webhook-timestamp": str(int(at.timestamp())),
                   "webhook-signature": signature(signing, msg_id=delivery["_id"], timestamp=at,
                                                  body=delivery["body"])}
        started = time.monotonic()
        timeout = self.settings.parley_webhook_timeout
        try:
            async with asyncio.timeout(timeout):
                status, answer = await _post(url, delivery["body"].encode(), headers, timeout, _reach(self.settings))
            entry |= {"statusCode": status, "answer": answer}
            if not 200 <= status < 300:
                entry["error"] = f"http_status: the receiver answered {status}"
        except TimeoutError:
            entry["error"] = f"timeout: no answer within {timeout:g} seconds"
        except outbound.Redirected as exc:
            entry |= {"statusCode": exc.status, "error": f"redirect: {exc}"}
        except outbound.TooLarge as exc:
            entry["error"] = f"answer_too_large: {exc}"
        except outbound.AddressRefused as exc:
            entry["error"] = f"address_refused: {exc}"
        except outbound.OutboundRefused as exc:
            entry["error"] = f"answer_refused: {exc}"
        except Exception as exc:  # the HTTP library's failures to connect, send or read, whatever their type
            entry["error"] = f"unreachable: {type(exc).__name__}: {str(exc)[:200]}"
        entry["durationMs"] = round((time.monotonic() - started) * 1000)
        return entry


async def _post(url: str, body: bytes, headers: dict[str, str], timeout: float,
                reach: outbound.Reach) -> tuple[int, str]:
    """POST `body` to `url` on the bounded client, connecting only where `reach` lets it; the answer's status and
    the start of its body."""
    async with outbound.bounded_client(limit=MAX_WEBHOOK_ANSWER_BYTES, timeout=timeout, reach=reach) as client, \
            client.stream("POST", url, content=body, headers=headers) as response:
        read = bytearray()
        async for chunk in response.aiter_raw():
            read += chunk
        return response.status_code, read[:ANSWER_SHOWN_CHARS].decode("utf-8", "replace")

