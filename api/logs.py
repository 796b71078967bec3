"""What the server's logs may hold: a duel's stream token (`?token=` of its events URL, a bearer credential for that
stream) never reaches the access log; its place in the line says `[redacted]`."""

from __future__ import annotations

import logging
import re

_TOKEN = re.compile(r"([?&]token=)[^&\s\"]*")


class RedactTokens(logging.Filter):
    """Blank the value of every `token=` query parameter in an access log line's arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_TOKEN.sub(r"\1[redacted]", arg) if isinstance(arg, str) else arg
                                for arg in record.args)
        elif isinstance(record.msg, str):
            record.msg = _TOKEN.sub(r"\1[redacted]", record.msg)
        return True


def redact_access_log() -> None:
    """Put `RedactTokens` on uvicorn's access logger (once)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactTokens) for f in access.filters):
        access.addFilter(RedactTokens())
