"""`GET /v1/me`: who the presented key belongs to, so a client (the Studio's sign-in) can check a key."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from parley.api.deps import CurrentPrincipal

router = APIRouter(prefix="/v1", tags=["keys"])


class Me(BaseModel):
    user: str = Field(description="The user the key was created for.")
    workspace: str = Field(description="The workspace whose data the key reads and writes.")
    scopes: list[str] = Field(description="What the key may do: debate, chat, conversations, workflows, readonly, admin.")


@router.get("/me", summary="The calling key's user, workspace and scopes (401 for an unknown key)")
async def me(principal: CurrentPrincipal) -> Me:
    return Me(user=principal.user, workspace=principal.workspace, scopes=sorted(principal.scopes))
