"""Parley's image, built from this checkout and run as a user would run it: two containers on one database.

The image is built on a base made from Debian's packages (no registry is reachable here; `tests.support.docker`),
and its containers run on the host's network, so that they reach the suite's embedded database and scripted model
server on 127.0.0.1, each on a port of its own. A duel starts on one container and is followed on the other; the
first is stopped as `docker stop` (or a pod's deletion) stops it, with SIGTERM, while the duel waits on a model call;
the other container resumes the duel, and the follower sees every message once.

Docker missing is a failure that says how to install it (as the browser tests do for Chromium), never a skip.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from parley.core.embedded import free_port
from tests.support import docker as engine
from tests.support.duel import OPPONENT_REPLY, USER_REPLY, script_duel
from tests.support.workers import FAST_FAILOVER, duel_messages_once, follow, round_of

STOP_TIMEOUT = 30  # seconds `docker stop` waits before it kills: a clean stop takes a few


@pytest.fixture(scope="module")
def docker() -> Iterator[engine.Docker]:
    if problem := engine.missing():
        pytest.fail(problem, pytrace=False)
    with engine.daemon() as daemon:
        yield daemon


@pytest.fixture(scope="module")
def image(docker) -> str:
    """Parley's image: the base made once and kept; a build after a change of Parley's code rebuilds one layer."""
    return docker.build(base=docker.base_image())


@pytest.fixture
def containers(docker, image, parley_env) -> Iterator[list[engine.Container]]:
    """Two containers of the image on the test's database and scripted model server, each answering /healthz."""
    env = {"MONGODB_URI": parley_env.mongodb_uri, "MONGODB_DB": parley_env.mongodb_db,
           "OPENAI_BASE_URL": parley_env.openai_base_url, "OPENAI_API_KEY": parley_env.openai_api_key,
           **FAST_FAILOVER}
    started: list[engine.Container] = []
    try:
        for name in ("parley-test-a", "parley-test-b"):
            started.append(engine.Container(docker, image, name=name, port=free_port(), env=env))
        for container in started:
            wait_healthy(container)
        yield started
    finally:
        for container in started:
            container.remove()


def wait_healthy(container: engine.Container, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            resp = httpx.get(container.url + "/healthz", timeout=3)
            if resp.status_code == 200:
                return resp.json()
        except httpx.HTTPError:
            pass
        state = container.docker.inspect(container.name)["State"]
        assert state["Running"] and time.monotonic() < deadline, (
            f"{container.name} never answered /healthz 200:\n{container.logs()}")
        time.sleep(0.25)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_the_image_runs_parley_as_a_user_without_privileges(docker, image):
    config = docker.inspect(image)["Config"]
    assert config["User"] == "10001:10001" and config["Entrypoint"] == ["parley", "serve"]
    assert "/readyz" in " ".join(config["Healthcheck"]["Test"])  # this worker and its database, not the model
    uid = docker.run("run", "--rm", "--network", "none", "--entrypoint", "id", image, "-u").stdout.strip()
    assert uid == "10001"
    # The Studio's bundle is in the image, and pip's certificate bundle (a build secret) is not.
    listed = docker.run("run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c",
                        "ls /opt/parley/lib/python3*/site-packages/parley/api/static/studio; ls /run/secrets 2>&1; "
                        "command -v pip || echo no pip").stdout
    assert "index.html" in listed and "assets" in listed
    assert "No such file" in listed and "no pip" in listed


def test_a_duel_moves_to_the_other_container_when_its_container_is_stopped(containers, llm, make_key, sync_db):
    holder, other = containers
    for container in containers:
        assert wait_healthy(container) == {"status": "ok"}  # without a key: the status alone
        health = httpx.get(container.url + "/healthz", headers=auth(make_key(["readonly"])), timeout=10).json()
        assert health["database"] == {"ok": True, "embedded": False} and health["model"]["ok"], health
        assert httpx.get(container.url + "/readyz", timeout=10).json() == {"status": "ok"}
    # The user's turn of round 2 waits at a gate the first time it is asked: the container is stopped meanwhile.
    llm.script(match="Round 2 of 5.", reply=USER_REPLY, hold="stop", times=1, token_delay=0.01)
    script_duel(llm, user_turn={"token_delay": 0.01}, opponent_turn={"token_delay": 0.01})
    key = make_key(["debate"])
    body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 5}
    with httpx.stream("POST", f"{holder.url}/api/debate", json=body, headers=auth(key), timeout=30) as started:
        assert started.status_code == 200, started.read()
        run_id = started.headers["x-run-id"]  # then hang up: the duel goes on without its first client

    events: list = []
    following = threading.Thread(target=lambda: events.extend(follow(f"{other.url}/v1/runs/{run_id}/events", key)))
    following.start()
    llm.wait_held("stop", timeout=60)
    stopped = holder.docker.run("stop", "--time", str(STOP_TIMEOUT), holder.name, timeout=STOP_TIMEOUT + 30)
    llm.release("stop")
    following.join(120)
    assert not following.is_alive(), "the follower's stream never ended"

    # The stopped container shut down by itself (Parley's exit on SIGTERM, 128 + 15), not killed at the timeout (137).
    state = holder.docker.inspect(holder.name)["State"]
    assert stopped.returncode == 0 and state["ExitCode"] == 143 and not state["OOMKilled"], (state, holder.logs())
    assert events and events[-1].event == "done", ([e.event for e in events], holder.logs(), other.logs())
    messages = duel_messages_once(events, USER_REPLY, OPPONENT_REPLY)

    run = httpx.get(f"{other.url}/v1/runs/{run_id}", headers=auth(key)).json()
    assert run["status"] == "completed" and run["worker"].startswith(f"{other.name}:"), run
    record = sync_db.runs.find_one({"_id": run_id})
    # Handed over at the shutdown (a crash would have counted one) and claimed by the other container.
    assert record["claims"] == 2 and record["crashes"] == 0, record
    assert sync_db.debates.find_one({"_id": run_id})["messages"] == messages
    # Round 1's turns, stored before the stop, were not asked again; only the interrupted turn was.
    asked = collections.Counter(
        ("user" if "You are Ada," in r["messages"][0]["content"] else "opponent", round_of(r))
        for r in llm.requests if round_of(r) is not None)
    assert asked[("user", 1)] == asked[("opponent", 1)] == 1 and asked[("user", 2)] == 2, asked
    assert sum(asked.values()) == 11

