"""Docker Engine for the container tests: a daemon, a base image made from Debian's packages, and Parley's image.

No image registry is reachable on these machines, so nothing is pulled: the base image is made with mmdebstrap and
`docker import`ed, and Parley's image is built on it from this checkout (`--network host`, pip's certificate bundle
as a build secret). The daemon is Debian's `dockerd` (package `docker.io`), run as root without a bridge or iptables
rules; the tests start it and stop it unless one already answers on its socket. Its data root is kept under
~/.cache/parley/docker, so a later run finds the base image and the build cache there and rebuilds only the layer of
Parley's own code.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Debian's client: a newer `docker` earlier on PATH may be a client without BuildKit (it needs the buildx plugin).
DOCKER = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"
MMDEBSTRAP = "/usr/bin/mmdebstrap"
# `make test` (its `docker` target) says the same when it cannot install them.
MISSING_DOCKER = ("The container tests need Docker Engine and mmdebstrap from Debian's packages ({paths}), run as "
                  "root. Install them with `apt-get install -y docker.io mmdebstrap` (Debian/Ubuntu) or `make docker`.")

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "parley" / "docker"
RUNTIME = Path("/run/parley-docker")  # socket, pid file and exec root: short paths (a socket's path has 107 bytes)
SOCKET = RUNTIME / "docker.sock"

# The base image: Debian's Python (3.11) and its venv module, CA certificates, useradd, the C++ runtime (numpy's
# wheels need it; apt brings it into Debian's usual images) and OpenMP's (the embedded variant's llama.cpp), without
# apt, docs or translations. The `essential` variant and the merged-/usr hook keep out apt and usrmerge (which pulls
# in all of Perl): 109 MB.
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "passwd", "libstdc++6", "libgomp1")
MMDEBSTRAP_ARGS = ("--variant=essential", f"--include={','.join(BASE_PACKAGES)}",
                   "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
                   "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
                   "--dpkgopt=path-include=/usr/share/doc/*/copyright", "--dpkgopt=path-exclude=/usr/share/locale/*",
                   "--dpkgopt=path-exclude=/usr/share/info/*")
BASE_IMAGE = f"parley-test-base:{SUITE}-{hashlib.sha256(' '.join(MMDEBSTRAP_ARGS).encode()).hexdigest()[:12]}"
IMAGE = "parley-test:latest"
# BuildKit's cache is kept up to this size, so that CI's cached data root does not grow without end.
KEEP_BUILD_CACHE = str(3 * 1024**3)


def missing() -> str | None:
    """Why Docker cannot be used here (MISSING_DOCKER's words), or None."""
    absent = [path for path in (DOCKER, DOCKERD, MMDEBSTRAP) if not os.access(path, os.X_OK)]
    if absent or os.geteuid() != 0:
        return MISSING_DOCKER.format(paths=", ".join((DOCKER, DOCKERD, MMDEBSTRAP)))
    return None


def pip_certificate() -> str | None:
    """The certificate bundle pip's configuration (or PIP_CERT) names, which the build needs to reach PyPI."""
    if os.environ.get("PIP_CERT"):
        return os.environ["PIP_CERT"]
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}).stdout
    for line in listed.splitlines():
        name, _, value = line.partition("=")
        if name.endswith(".cert") and value.strip("'\""):
            return value.strip("'\"")
    return None


@dataclass
class Docker:
    """The client of one daemon: `run(*args)` runs `docker args` and returns its completed process."""

    socket: Path

    def run(self, *args: str, check: bool = True, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
        done = subprocess.run([DOCKER, "-H", f"unix://{self.socket}", *args], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "DOCKER_BUILDKIT": "1"}, **kwargs)
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args[:3])} … failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return done

    def answers(self) -> bool:
        try:
            return self.run("version", "--format", "{{.Server.Version}}", check=False, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def has_image(self, name: str) -> bool:
        return self.run("image", "inspect", name, check=False).returncode == 0

    def inspect(self, name: str) -> dict:
        return json.loads(self.run("inspect", name).stdout)[0]

    def base_image(self) -> str:
        """BASE_IMAGE, made from Debian's packages the first time (about 30 s), then kept."""
        if not self.has_image(BASE_IMAGE):
            CACHE.mkdir(parents=True, exist_ok=True)
            log = CACHE / "mmdebstrap.log"
            with log.open("w") as errors:
                make = subprocess.Popen([MMDEBSTRAP, *MMDEBSTRAP_ARGS, SUITE, "-"], stdout=subprocess.PIPE,
                                        stderr=errors)
                imported = self.run("import", "-", BASE_IMAGE, stdin=make.stdout, check=False, timeout=600)
                make.stdout.close()
                make.wait(60)
            assert make.returncode == 0, f"mmdebstrap failed:\n{log.read_text()[-4000:]}"
            assert imported.returncode == 0, f"docker import failed:\n{imported.stderr[-4000:]}"
            stale = self.run("images", "--format", "{{.Repository}}:{{.Tag}}", BASE_IMAGE.split(":")[0]).stdout.split()
            for name in set(stale) - {BASE_IMAGE}:  # bases of earlier package lists
                self.run("rmi", name, check=False)
        return BASE_IMAGE

    def build(self, *, base: str, tag: str = IMAGE) -> str:
        """Build Parley's image from this checkout on `base`, pip's certificate bundle passed as a secret."""
        secret = pip_certificate()
        args = ["build", "--network", "host", "--build-arg", f"BASE={base}", "--tag", tag, "--progress", "plain",
                *(["--secret", f"id=pipcert,src={secret}"] if secret else []), str(ROOT)]
        self.run(*args, timeout=1200)
        self.run("image", "prune", "--force")  # the images this tag named before
        self.run("builder", "prune", "--force", "--keep-storage", KEEP_BUILD_CACHE)
        return tag


@contextmanager
def daemon() -> Iterator[Docker]:
    """A Docker daemon: the one answering on SOCKET, else one started here (as root) and stopped on the way out."""
    docker = Docker(SOCKET)
    if docker.answers():
        yield docker
        return
    RUNTIME.mkdir(parents=True, exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    log = CACHE / "dockerd.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [DOCKERD, "--bridge=none", "--iptables=false", "--data-root", str(CACHE / "data"),
             "--exec-root", str(RUNTIME / "exec"), "--pidfile", str(RUNTIME / "dockerd.pid"),
             "-H", f"unix://{SOCKET}"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not docker.answers():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"dockerd did not start:\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        yield docker
    finally:
        proc.terminate()  # dockerd stops its containers' shims and its containerd, then exits
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


class Container:
    """One container of Parley's image on the host's network (so it reaches, and is reached on, 127.0.0.1)."""

    def __init__(self, docker: Docker, image: str, *, name: str, port: int, env: dict[str, str]) -> None:
        self.docker, self.name, self.port = docker, name, port
        self.url = f"http://127.0.0.1:{port}"
        docker.run("rm", "--force", name, check=False)
        variables = {**env, "PARLEY_PORT": str(port)}
        environment = [arg for key, value in variables.items() for arg in ("-e", f"{key}={value}")]
        # Its own hostname: with the host's network a container would otherwise take the host's, and two containers
        # (both PID 1) would have one worker name in run records. A read-only root, as deploy/kubernetes runs it:
        # Parley writes only to PARLEY_HOME and /tmp.
        docker.run("run", "--detach", "--name", name, "--hostname", name, "--network", "host", "--read-only",
                   "--tmpfs", "/tmp", "--tmpfs", "/var/lib/parley:uid=10001,gid=10001,mode=0700", *environment, image)

    def logs(self) -> str:
        done = self.docker.run("logs", self.name, check=False)
        return (done.stdout + done.stderr)[-6000:]

    def remove(self) -> None:
        self.docker.run("rm", "--force", self.name, check=False)

