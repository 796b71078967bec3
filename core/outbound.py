"""Parley's outbound HTTP to URLs an admin gives it (MCP tool servers, `llm.mcp`; webhook receivers,
`services.webhooks`): one set of rules for both.

A URL is checked, stored and called in one form (`normalise_url`), and must lie under one of the deployment's
allowed prefixes (`allowed_refusal`: `PARLEY_TOOL_URLS`, `PARLEY_WEBHOOK_URLS`), so what the allow-list admits is
what the server receives; a URL or a header an admin may not use says why (`header_refusal`). A request goes out
on a client that follows no redirect (a stored secret goes only to the checked URL), refuses a compressed answer
(whose size read is not its size) and reads at most a bound of each answer (`bounded_client`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import re
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, unquote, urlsplit

if TYPE_CHECKING:
    import httpx2

# httpx2 is imported by `bounded_client`, not here: a graph whose speakers may call tools imports `llm.mcp`, which
# imports this module, and must not pay for the HTTP library until a call is made.

log = logging.getLogger(__name__)

_PATH_SAFE = "-._~!$&'()*+,;=:@"  # RFC 3986 unreserved characters and sub-delimiters, kept as they are in a path
_HOST = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Query parameters that carry a credential, by a word of their name (`api_key`, `apiKey`, `X-Amz-Signature`) or by
# its ending (`accesstoken`): a URL is shown to admins and written to logs, a header is not.
_CREDENTIAL_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "auth", "authorization", "signature",
    "sig", "credential", "credentials", "session", "sessionid", "jwt", "bearer", "code",
})
_CREDENTIAL_ENDINGS = ("key", "token", "secret", "password", "passwd", "signature", "credential", "credentials")


def normalise_url(url: str) -> str:
    """`url` in the one form Parley checks against an allow-list (`PARLEY_TOOL_URLS`, `PARLEY_WEBHOOK_URLS`), stores
    and calls, so that the server receives the path that was checked: scheme and host lower-cased, the scheme's default port dropped, dot segments (`.`,
    `..`, spelled `%2e` too) resolved, the path's percent-encoding made canonical (unreserved characters decoded,
    others encoded), the fragment dropped; the query kept as written.

        >>> normalise_url("HTTP://Tools.Example:80/mcp/./a/../%7Eb#x")
        'http://tools.example/mcp/~b'

    Raises:
        ValueError: not an http(s) URL of plain ASCII, or one a server could read otherwise than Parley: a user name
            or password, an encoded `/` or `\\` or an empty segment in the path, a dot segment with parameters
            (`..;`), a malformed percent-escape; or one carrying a credential in its query (send it in a header).
            The message never repeats the query.
    """
    if not url.isascii() or any(c <= " " or c in "\\\x7f" for c in url):
        raise ValueError("url must be plain ASCII, without spaces, control characters or backslashes (percent-encode "
                         "them in the path; a host is given in its punycode form)")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.netloc:
        raise ValueError(f"url must be an http:// or https:// URL, not {url.split('?', 1)[0]!r}")
    if "@" in parts.netloc:
        raise ValueError("url must not carry a user name or password; send credentials in headers")
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if _is_credential(name):
            raise ValueError(f"url: the query parameter {name!r} carries a credential; send it in headers (e.g. "
                             "`Authorization` or the header the server reads), never in the URL")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("url has an invalid port") from None
    host = _host(parts.hostname or "", bracketed=parts.netloc.startswith("["))
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    return f"{scheme}://{netloc}{_path(parts.path)}" + (f"?{parts.query}" if parts.query else "")


def _host(host: str, *, bracketed: bool) -> str:
    if bracketed:
        try:
            return f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            raise ValueError("url: the host is not an IPv6 address") from None
    host = host.rstrip(".")
    if not _HOST.match(host):
        raise ValueError("url: the host must be a name or an address (letters, digits, '-', '_' and '.')")
    return host


def _path(path: str) -> str:
    """`path` with its dot segments resolved (RFC 3986, 5.2.4) and its percent-encoding canonical."""
    pieces = path.split("/")[1:] if path else [""]
    kept: list[str] = []
    for at, piece in enumerate(pieces):
        last = at == len(pieces) - 1
        if _BAD_ESCAPE.search(piece):
            raise ValueError("url: the path holds a '%' that is not a percent-escape (%XX)")
        try:
            segment = unquote(piece, errors="strict")
        except UnicodeDecodeError:
            raise ValueError("url: the path's percent-escapes are not UTF-8") from None
        if "/" in segment or "\\" in segment or any(c < " " or c == "\x7f" for c in segment):
            raise ValueError("url: the path holds an encoded '/', '\\' or control character (%2F, %5C, ...)")
        if segment.split(";", 1)[0] in (".", ".."):
            if ";" in segment:
                raise ValueError("url: the path holds a dot segment with parameters ('..;')")
            if segment == ".." and kept:
                kept.pop()
            if last:
                kept.append("")
            continue
        if not segment and not last:
            raise ValueError("url: the path holds an empty segment ('//')")
        kept.append(quote(segment, safe=_PATH_SAFE))
    return "/" + "/".join(kept)


def _is_credential(name: str) -> bool:
    words = re.findall(r"[a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return any(w in _CREDENTIAL_WORDS for w in words) or "".join(words).endswith(_CREDENTIAL_ENDINGS)


def shown_url(url: str) -> str:
    """`url` as it may be shown: any user name, password or credential in its query replaced by `[redacted]` (for a
    URL stored before they were refused; `normalise_url` refuses them now)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2] if "@" in parts.netloc else parts.netloc
    query = "&".join(
        f"{pair.partition('=')[0]}=[redacted]" if _is_credential(unquote(pair.partition("=")[0])) else pair
        for pair in parts.query.split("&")) if parts.query else ""
    return parts._replace(netloc=netloc, query=query, fragment="").geturl()


# Headers that frame the message or the connection, or name the host: the HTTP client sets them for the URL Parley
# checked, an admin never does. `Accept-Encoding` too: an answer is read uncompressed, so its size is what is read.
CONNECTION_HEADERS = frozenset({"host", "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
                                "content-length", "accept-encoding"})
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")


def header_refusal(name: str, value: str = "") -> str | None:
    """Why an admin may not have Parley send the header `name` (with `value`) to an outbound URL, or None when they
    may."""
    if not _HEADER_NAME.match(name):
        return f"headers: {name!r} is not a header name"
    if name.lower() in CONNECTION_HEADERS or name.lower().startswith("proxy-"):
        return (f"headers: {name} may not be set: the host, connection and framing headers (Host, Connection, "
                "Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade, Content-Length, Accept-Encoding) are "
                "Parley's to send")
    if any(c in value for c in "\r\n\x00"):
        return f"headers: the value of {name} holds a line break or NUL"
    return None


def under(url: str, prefix: str, *, setting: str) -> bool:
    """Whether the normal `url` is `prefix` or below it: same scheme, host and port, and a path below the prefix's
    (a prefix `https://a.example/mcp` admits `https://a.example/mcp` and `https://a.example/mcp/x`, not
    `https://a.example/mcpx` nor `https://a.example.evil/`). A prefix that is no URL admits nothing (and is logged,
    naming `setting`)."""
    try:
        p = urlsplit(normalise_url(prefix))
    except ValueError:
        log.warning("%s: %r is not a URL Parley can compare; it admits nothing", setting, prefix)
        return False
    u = urlsplit(url)
    if (u.scheme, u.netloc) != (p.scheme, p.netloc):
        return False
    base = p.path.rstrip("/")
    return u.path == base or u.path.startswith(base + "/") or not base


# --- where a name leads ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reach:
    """Which addresses an outbound call may connect to: any public one; a private, loopback, link-local or other
    non-public one only where the deployment names it: the allow-list (`allowed`, the prefixes of the setting
    `setting`) names that address itself (`http://127.0.0.1:9000/`) or `localhost` (its loopback addresses), or
    `networks` (`PARLEY_OUTBOUND_NETWORKS`: `10.0.0.0/8`, `fd00::/8` …) holds it."""

    allowed: tuple[str, ...]
    setting: str
    networks: tuple[str, ...] = ()

    @functools.cached_property
    def _named(self) -> frozenset[str]:
        return frozenset(urlsplit(p).hostname or "" for p in self._prefixes)

    @functools.cached_property
    def _prefixes(self) -> tuple[str, ...]:
        normal = []
        for prefix in self.allowed:
            with contextlib.suppress(ValueError):
                normal.append(normalise_url(prefix))
        return tuple(normal)

    @functools.cached_property
    def _networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(n, strict=False) for n in self.networks)

    def refusal(self, host: str, address: str) -> str | None:
        """Why a call to `host` may not connect to `address` (one `host` resolved to), or None when it may."""
        ip = _unmapped(ipaddress.ip_address(address))
        if ip.is_global and not ip.is_multicast:
            return None
        bare = host.strip("[]").lower()
        if bare in self._named and (_is_ip(bare) or (bare == "localhost" and ip.is_loopback)):
            return None
        if any(ip in network for network in self._networks):
            return None
        return (f"{host} resolves to {ip}, a private, loopback or link-local address that neither {self.setting} nor "
                "PARLEY_OUTBOUND_NETWORKS names")


def _unmapped(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (itself, when it is an address), by the system's resolver, off the event
    loop. Tests replace it to make a name lead elsewhere."""
    bare = host.strip("[]")
    if _is_ip(bare):
        return [bare]
    infos = await asyncio.get_running_loop().getaddrinfo(bare, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


async def reachable_address(url: str, policy: Reach) -> tuple[str | None, str | None]:
    """Where a call to the normal `url` may connect: `(address, None)`, the first address its host resolves to that
    `policy` admits; `(None, why)` when it resolves to none such. A name that does not resolve raises `OSError`."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    addresses = await resolve(host, parts.port or _DEFAULT_PORTS[parts.scheme])
    why = None
    for address in addresses:
        if (why := policy.refusal(host, address)) is None:
            return address, None
    return None, why or f"{host} resolves to no address"


def allowed_refusal(url: str, allowed: Sequence[str], *, setting: str, what: str) -> str | None:
    """Why the deployment does not let Parley call the normal `url` (`normalise_url`), or None when it does: it must
    lie `under` one of `allowed`, the prefixes of the setting named `setting` (`what`: the kind of URL, for the
    message, e.g. "URL servers"). An empty list allows none."""
    if not allowed:
        return f"{what} are not enabled on this deployment ({setting} is empty)"
    if not any(under(url, prefix, setting=setting) for prefix in allowed):
        return f"{url} is not under any of {setting} ({', '.join(allowed)})"
    return None


# --- the bounded client ------------------------------------------------------------------------------------------

REDIRECTS = frozenset({301, 302, 303, 307, 308})


class OutboundRefused(Exception):
    """What the bounded client stopped a request for (a subclass says which)."""


class Redirected(OutboundRefused):
    """The server answered with a redirect, which Parley does not follow."""

    def __init__(self, status: int, location: str) -> None:
        super().__init__(f"redirect ({status}) to {shown_url(location).split('?', 1)[0]}, not followed")
        self.status, self.location = status, location


class Compressed(OutboundRefused):
    """The server answered compressed, which Parley does not read."""

    def __init__(self) -> None:
        super().__init__("compressed answer, not read")


class TooLarge(OutboundRefused):
    """The answer's body was larger than the client reads; the rest was not read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"answer larger than {limit:,} bytes, not read past them")
        self.limit = limit


class AddressRefused(OutboundRefused):
    """The URL's host resolved to an address the deployment does not let Parley call (`Reach`)."""


def bounded_client(*, limit: int, timeout: float, reach: Reach, headers: Mapping[str, str] | None = None,
                   stop: Callable[[OutboundRefused], BaseException] = lambda why: why) -> httpx2.AsyncClient:
    """An httpx2 client that sends each request as is and follows no redirect; its response's body is read only up
    to `limit` bytes. Each request's host is resolved once and the connection made to the address checked (`reach`:
    a name that leads to a private, loopback or link-local address the deployment does not name is refused), its
    `Host` header and TLS server name still the URL's: no second lookup can lead it elsewhere (DNS rebinding). A
    refused address, a redirect, a compressed answer or a body past `limit` raises `stop(why)` (by default `why`
    itself, an `OutboundRefused`; `llm.mcp` turns it into its own error and cancels its call). Every request asks
    for an uncompressed answer and has `timeout` seconds for each step (connect, write, each read)."""
    import httpx2

    return httpx2.AsyncClient(headers={**(headers or {}), "Accept-Encoding": "identity"},
                              timeout=httpx2.Timeout(timeout), follow_redirects=False,
                              transport=_bounded_transport()(limit, stop, reach))


@functools.cache
def _bounded_transport() -> type:
    """The transport of `bounded_client` (a class made on first use: httpx2 is imported only then)."""
    import httpx2

    class Capped(httpx2.AsyncByteStream):
        def __init__(self, stream: httpx2.AsyncByteStream, limit: int,
                     stop: Callable[[OutboundRefused], BaseException]) -> None:
            self.stream, self.limit, self.stop = stream, limit, stop

        async def __aiter__(self) -> AsyncIterator[bytes]:
            read = 0
            async for chunk in self.stream:
                read += len(chunk)
                if read > self.limit:
                    raise self.stop(TooLarge(self.limit))
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Bounded(httpx2.AsyncBaseTransport):
        def __init__(self, limit: int, stop: Callable[[OutboundRefused], BaseException], reach: Reach) -> None:
            self.inner, self.limit, self.stop, self.reach = httpx2.AsyncHTTPTransport(), limit, stop, reach

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            host = request.url.host
            address, why = await reachable_address(str(request.url), self.reach)
            if address is None:
                raise self.stop(AddressRefused(why or "refused"))
            if address != host.strip("[]"):  # connect to the address checked; the Host header is the URL's already
                if request.url.scheme == "https":
                    request.extensions = {**request.extensions, "sni_hostname": host}
                request.url = request.url.copy_with(host=address)
            response = await self.inner.handle_async_request(request)
            length = response.headers.get("content-length", "")
            why: OutboundRefused | None = None
            if response.status_code in REDIRECTS and "location" in response.headers:
                why = Redirected(response.status_code, response.headers["location"])
            elif response.headers.get("content-encoding", "identity").lower() != "identity":
                why = Compressed()
            elif length.isdigit() and int(length) > self.limit:
                why = TooLarge(self.limit)
            if why is not None:
                await response.aclose()
                raise self.stop(why)
            return httpx2.Response(response.status_code, headers=response.headers,
                                   stream=Capped(response.stream, self.limit, self.stop),
                                   extensions=response.extensions)

        async def aclose(self) -> None:
            await self.inner.aclose()

    return Bounded
