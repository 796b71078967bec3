"""`/v1/webhooks`: the receivers a workspace's admin subscribed to run events, their signing secrets and the log of
their deliveries (`services.webhooks`). For the workspace's `admin` keys only; another workspace's webhook or
delivery is not found."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Response

from parley.api.deps import AppSettings, Db, Principal, Services, require_scope
from parley.api.openapi import errors
from parley.services import webhooks as service
from parley.services.webhooks import SecretRotation, WebhookCreate, WebhookUpdate

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"],
                   responses=errors((403, "The key is not one of the workspace's `admin` keys.")))

Reader = Annotated[Principal, Depends(require_scope("admin"))]
Writer = Annotated[Principal, Depends(require_scope("admin", write=True))]

REFUSED_URL = (400, "A field is invalid; the URL is not under the deployment's PARLEY_WEBHOOK_URLS, or not a URL "
                    "Parley calls (`webhook_url_not_allowed`); or the workspace has as many webhooks as it may "
                    "(`too_many_webhooks`).")
NO_WEBHOOK = (404, "No webhook with this id in the key's workspace (`webhook_not_found`).")
NO_DELIVERY = (404, "No delivery with this id in the key's workspace (`delivery_not_found`).")
DeliveryStatus = Literal["pending", "delivered", "failed", "void"]


@router.post("", status_code=201, summary="Subscribe a receiver to run events; its signing secret is shown once",
             responses=errors(REFUSED_URL))
async def create_webhook(body: WebhookCreate, db: Db, settings: AppSettings, caller: Writer) -> dict[str, Any]:
    return {"webhook": await service.create_webhook(db, settings, principal=caller, body=body)}


@router.get("", summary="List the workspace's webhooks")
async def list_webhooks(db: Db, caller: Reader) -> dict[str, Any]:
    return await service.list_webhooks(db, principal=caller)


@router.get("/deliveries", summary="The log of the workspace's deliveries, newest first",
            responses=errors((400, "A query parameter is invalid, or `cursor` is not one this route gave."),
                             NO_WEBHOOK))
async def list_deliveries(
    db: Db, caller: Reader,
    webhook: Annotated[str | None, Query(max_length=64, description="Only the deliveries to this webhook.")] = None,
    status: Annotated[DeliveryStatus | None, Query(description="Only deliveries in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=100, description="Deliveries per page.")] = 20,
    cursor: Annotated[str | None, Query(max_length=200, description="`nextCursor` of the previous page.")] = None,
) -> dict[str, Any]:
    return await service.list_deliveries(db, principal=caller, webhook_id=webhook, status=status, limit=limit,
                                         cursor=cursor)


@router.get("/deliveries/{delivery_id}", summary="One delivery: its payload, status and attempts",
            responses=errors(NO_DELIVERY))
async def get_delivery(delivery_id: str, db: Db, caller: Reader) -> dict[str, Any]:
    return {"delivery": await service.get_delivery(db, principal=caller, delivery_id=delivery_id)}


@router.post("/deliveries/{delivery_id}/replay", status_code=202,
             summary="Send a delivered or failed delivery again, with the same id",
             responses=errors(NO_DELIVERY, (409, "The delivery is pending: it will be sent (`delivery_pending`); "
                                                 "or void: its event never happened (`delivery_void`).")))
async def replay_delivery(delivery_id: str, db: Db, caller: Writer) -> dict[str, Any]:
    return {"delivery": await service.replay_delivery(db, principal=caller, delivery_id=delivery_id)}


@router.get("/{webhook_id}", summary="One webhook (its secrets' dates, never their values)",
            responses=errors(NO_WEBHOOK))
async def get_webhook(webhook_id: str, db: Db, caller: Reader) -> dict[str, Any]:
    return {"webhook": await service.get_webhook(db, principal=caller, webhook_id=webhook_id)}


@router.patch("/{webhook_id}", summary="Change a webhook's URL, events, kinds, description or activity",
              responses=errors(REFUSED_URL, NO_WEBHOOK))
async def update_webhook(webhook_id: str, body: WebhookUpdate, db: Db, settings: AppSettings,
                         caller: Writer) -> dict[str, Any]:
    return {"webhook": await service.update_webhook(db, settings, principal=caller, webhook_id=webhook_id,
                                                    body=body)}


@router.delete("/{webhook_id}", status_code=204, summary="Unsubscribe a receiver (its deliveries' log stays)",
               responses=errors(NO_WEBHOOK))
async def delete_webhook(webhook_id: str, db: Db, caller: Writer) -> Response:
    await service.delete_webhook(db, principal=caller, webhook_id=webhook_id)
    return Response(status_code=204)


@router.post("/{webhook_id}/rotate", summary="Give a webhook a new secret, shown once; the old one signs too "
             "for `graceSeconds`", responses=errors(NO_WEBHOOK, (409, "Rotated at the same moment by another "
                                                                 "request (`webhook_rotating`): ask again.")))
async def rotate_secret(webhook_id: str, db: Db, settings: AppSettings, caller: Writer,
                        body: SecretRotation | None = None) -> dict[str, Any]:
    return {"webhook": await service.rotate_secret(db, settings, principal=caller, webhook_id=webhook_id,
                                                   body=body or SecretRotation())}


@router.post("/{webhook_id}/test", status_code=202, summary="Send the webhook a `webhook.test` delivery",
             responses=errors(NO_WEBHOOK, (409, "The webhook is not active (`webhook_inactive`)."),
                              (429, "The workspace asked for as many test pings as it may in a minute "
                                    "(`rate_limited`); `Retry-After` says when to ask again.")))
async def test_webhook(webhook_id: str, backend: Services, caller: Writer) -> dict[str, Any]:
    return {"delivery": await service.test_webhook(backend, principal=caller, webhook_id=webhook_id)}
