"""Reading round-table requests on the scripted model server."""

from __future__ import annotations

import re


def seat_name(request: dict) -> str | None:
    """The name of the seat a request speaks for ("You are Claire, Finance, seated ..." in its system message), or
    None for the table's other calls (stance readings, synthesis)."""
    found = re.search(r"You are ([^,]+), .*seated at a round table", request["messages"][0]["content"])
    return found[1] if found else None
