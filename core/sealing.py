"""Secrets Parley must read back to use (a webhook's signing secrets), sealed at rest: the database holds a Fernet
token (AES-128-CBC and HMAC-SHA256, `cryptography`'s), never the secret, so a copy of the database, a backup or a
replica's disk gives no one the secrets that sign Parley's deliveries.

The keys come from the deployment, not the database: `PARLEY_ENCRYPTION_KEYS`, a comma list of Fernet keys (each
`Fernet.generate_key()`, 32 random bytes in URL-safe base64). The first seals; every one listed opens, so a key is
rotated by putting the new one first and keeping the old one after it until every secret is sealed again under the
new (each worker does so when it starts, `services.webhooks.reseal_secrets`); then the old one is dropped.

With no key set, Parley keeps one of its own in `PARLEY_HOME/encryption.key` (made on first use, 32 random bytes,
readable by its owner only): enough for the embedded setup and for workers that share `PARLEY_HOME`, never stored
in the database. A deployment whose workers run on several machines, or whose PARLEY_HOME is not kept, sets
`PARLEY_ENCRYPTION_KEYS` (a secret each worker's environment receives): a secret sealed by a key a worker does not
hold cannot be opened there (its deliveries fail with `secret_unreadable` until the key is given).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

# `cryptography` is imported where a secret is sealed or opened, not here: the settings check a key's form with this
# module, and every command reads the settings.

log = logging.getLogger(__name__)

KEY_FILE = "encryption.key"
SETTING = "PARLEY_ENCRYPTION_KEYS"


class Unreadable(Exception):
    """A sealed secret that none of the deployment's keys opens."""


def key_id(key: str) -> str:
    """A short name of `key` stored beside what it sealed (which key to open it with; a digest, not the key)."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def check_key(key: str) -> str:
    """`key` when it is a Fernet key.

    Raises:
        ValueError: it is not one (32 bytes in URL-safe base64, as `Fernet.generate_key()` makes them).
    """
    try:
        valid = len(base64.urlsafe_b64decode(key.encode())) == 32
    except (ValueError, binascii.Error):
        valid = False
    if not valid:
        raise ValueError(f"{SETTING}: a key is 32 bytes in URL-safe base64 (Fernet.generate_key()), and one is "
                         "not") from None
    return key


@dataclass(frozen=True)
class Sealer:
    """Seals with the first of `keys`, opens with any of them."""

    keys: tuple[str, ...]

    @functools.cached_property
    def _fernet(self) -> MultiFernet:
        from cryptography.fernet import Fernet, MultiFernet

        return MultiFernet([Fernet(k) for k in self.keys])

    @property
    def key(self) -> str:
        """The name (`key_id`) of the key that seals."""
        return key_id(self.keys[0])

    def seal(self, secret: str) -> dict[str, str]:
        """`secret` as it is stored: `{"sealed": token, "key": <the sealing key's name>}`."""
        return {"sealed": self._fernet.encrypt(secret.encode()).decode(), "key": self.key}

    def open(self, stored: dict[str, Any]) -> str:
        """The secret that `stored` (a `seal`ed entry, or one stored in clear before secrets were sealed) holds.

        Raises:
            Unreadable: none of the keys opens it.
        """
        from cryptography.fernet import InvalidToken

        if "sealed" not in stored:
            return stored["secret"]  # stored before secrets were sealed: sealed again at the next start
        try:
            return self._fernet.decrypt(stored["sealed"].encode()).decode()
        except InvalidToken:
            raise Unreadable(f"sealed by a key ({stored.get('key')}) that is not among {SETTING}") from None

    def current(self, stored: dict[str, Any]) -> bool:
        """Whether `stored` is sealed by the key that seals now."""
        return "sealed" in stored and stored.get("key") == self.key


def sealer(keys: list[str], home: Path) -> Sealer:
    """The deployment's sealer: `keys` (`PARLEY_ENCRYPTION_KEYS`) when set, else the key kept in `home`."""
    return _sealer(tuple(keys), home)


@functools.cache
def _sealer(keys: tuple[str, ...], home: Path) -> Sealer:
    return Sealer(keys or (_home_key(home),))


def _home_key(home: Path) -> str:
    """The key in `home/encryption.key`, made there (owner-only) when there is none; of two processes making it at
    once, one's is kept and both use it."""
    path = home / KEY_FILE
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        draft = home / f".{KEY_FILE}.{os.getpid()}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())  # as Fernet.generate_key()
        try:
            os.link(draft, path)  # atomic, and never over a key another process made
            log.warning("No %s set: webhook secrets are sealed with a key made in %s; set %s where workers do not "
                        "share this folder", SETTING, path, SETTING)
        except FileExistsError:
            pass
        finally:
            draft.unlink(missing_ok=True)
    return check_key(path.read_text().strip())
