"""Hosts on one machine: Linux network namespaces joined by a bridge, made (as root, with iproute2's `ip`) for tests and
benches that run Parley's workers as hosts that can lose each other.

    with Network(3) as net:       # a bridge with the shared services' addresses, and three hosts on it
        net.hosts[0].run([...])   # a process inside host 1's namespace (`ip netns exec`)
        net.cut(net.hosts[0], net.db)    # host 1 can no longer reach the database's address
        net.heal(net.hosts[0], net.db)   # ... and can again

The bridge holds three addresses of this machine, one for each shared party, so that a host can be cut from one and
not the others: `db` (the database listens there), `model` (the model server) and `clients` (the address test
clients connect from, `client()`). Each host gets its own address on the bridge. A cut is a blackhole route in the
host's namespace, so packets it sends to that address go nowhere (its established connections hang, as they would
behind a broken link); healing removes the route. Names carry a random tag, so a run that crashed and left its
namespaces behind never collides with the next; `close` removes everything it made, whatever happened.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field

import httpx


class NetworkUnavailable(RuntimeError):
    """The machine cannot make namespaces for this test: not root, or no iproute2."""


def require_root() -> None:
    """Raise `NetworkUnavailable`, saying what is missing, unless this process can make network namespaces."""
    if os.geteuid() != 0:
        raise NetworkUnavailable("this test makes network namespaces (one per host) and must run as root "
                                 f"(it runs as uid {os.geteuid()}): run it with sudo, or in CI's root container")
    if shutil.which("ip") is None:
        raise NetworkUnavailable("this test needs iproute2's `ip` (Debian: apt-get install iproute2)")


def ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = ["ip", *(["netns", "exec", namespace, "ip"] if namespace else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done


@dataclass
class Host:
    """One host: a network namespace, its address on the bridge, and the addresses it is cut from now."""

    name: str
    namespace: str
    address: str
    cut_from: set[str] = field(default_factory=set)

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


class Network:
    """A bridge with the shared parties' addresses (`db`, `model`, `clients`) and `count` hosts on it."""

    def __init__(self, count: int) -> None:
        require_root()
        self.tag = uuid.uuid4().hex[:6]
        used = ip("-4", "-o", "addr").stdout
        free = [n for n in range(1, 255) if f" 10.77.{n}." not in used]
        if not free:
            raise NetworkUnavailable("no free 10.77.N.0/24 subnet for the test's bridge")
        self.subnet = f"10.77.{random.choice(free)}"
        self.bridge = f"plb{self.tag}"
        self.db, self.model, self.clients = f"{self.subnet}.1", f"{self.subnet}.254", f"{self.subnet}.253"
        self.hosts: list[Host] = []
        self._links: list[str] = []
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            for address in (self.db, self.model, self.clients):
                ip("addr", "add", f"{address}/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for n in range(1, count + 1):
                self._add_host(n)
        except BaseException:
            self.close()
            raise

    def _add_host(self, n: int) -> None:
        host = Host(f"host{n}", f"parley-{self.tag}-h{n}", f"{self.subnet}.{10 + n}")
        ip("netns", "add", host.namespace)
        self.hosts.append(host)
        link = f"plv{self.tag}{n}"
        ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        self._links.append(link)
        ip("link", "set", link, "master", self.bridge, "up")
        ip("addr", "add", f"{host.address}/24", "dev", "eth0", namespace=host.namespace)
        ip("link", "set", "eth0", "up", namespace=host.namespace)
        ip("link", "set", "lo", "up", namespace=host.namespace)

    def cut(self, host: Host, address: str) -> None:
        """`host` can no longer reach `address` (a blackhole route in its namespace)."""
        ip("route", "add", "blackhole", f"{address}/32", namespace=host.namespace)
        host.cut_from.add(address)

    def heal(self, host: Host, address: str) -> None:
        """`host` reaches `address` again."""
        ip("route", "del", "blackhole", f"{address}/32", namespace=host.namespace)
        host.cut_from.discard(address)

    def client(self, **kwargs) -> httpx.Client:
        """An HTTP client whose connections come from the `clients` address (a host cut from it answers none)."""
        return httpx.Client(transport=httpx.HTTPTransport(local_address=self.clients), **kwargs)

    def close(self) -> None:
        """Remove the namespaces, links and bridge this network made (those already gone are skipped)."""
        for host in self.hosts:
            ip("netns", "del", host.namespace, check=False)
        for link in self._links:
            ip("link", "del", link, check=False)
        ip("link", "del", self.bridge, check=False)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
