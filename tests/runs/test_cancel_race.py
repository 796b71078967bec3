"""An acknowledged cancel is never ignored: 50 duels cancelled at random points, every one whose cancel was
accepted (202) ends `cancelled`, and no model call of it starts once the cancel was acknowledged (plus one poll).
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import pytest

from parley.llm.factory import ModelFactory
from parley.runs.stops import RunStopped, StopGuard
from parley.services import duel as duel_service
from tests.support.duel import script_duel

CANCELS = 50
AT_ONCE = 10  # duels under way together
ROUNDS = 2


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def timed_requests(llm, monkeypatch) -> list[tuple[float, str]]:
    """(arrival time, transcript) of every model request the scripted server receives from now on."""
    arrivals: list[tuple[float, str]] = []
    lock = threading.Lock()
    record = llm.state.record

    def timed(body: dict, peer: str | None = None) -> int:
        transcript = "\n".join(str(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict))
        with lock:
            arrivals.append((time.monotonic(), transcript))
        return record(body, peer)

    monkeypatch.setattr(llm.state, "record", timed)
    return arrivals


@pytest.fixture
def quick_duels(monkeypatch):
    monkeypatch.setattr(duel_service, "RATE_LIMIT", "1000/minute")


def test_fifty_cancels_at_random_points_are_all_honoured(http, make_key, llm, parley_env, monkeypatch, quick_duels):
    # Every turn streams its words a few milliseconds apart, so a duel lasts long enough to be cancelled
    # anywhere: before the opponent is chosen, mid-turn, between turns, while it is judged.
    script_duel(llm, user_turn={"token_delay": 0.004}, opponent_turn={"token_delay": 0.004})
    arrivals = timed_requests(llm, monkeypatch)
    key = make_key(["debate"])
    rng = random.Random(15)
    delays = [rng.uniform(0, 0.6) for _ in range(CANCELS)]
    poll = parley_env.parley_run_poll

    def one(index: int) -> dict:
        topic = f"Debate number {index}: should remote work be the default?"
        with httpx.Client(base_url=http.base_url, timeout=60) as client:
            with client.stream("POST", "/api/debate", headers=auth(key),
                               json={"topic": topic, "userProfile": {"name": "Ada"}, "rounds": ROUNDS}) as resp:
                assert resp.status_code == 200
                run_id = resp.headers["x-run-id"]
                time.sleep(delays[index])  # a random point of the duel; the assertions hold for any
                answer = client.post(f"/v1/runs/{run_id}/cancel", headers=auth(key))
                acked = time.monotonic()
                assert answer.status_code in (202, 409), answer.text
                events = [line for line in resp.iter_lines() if line.startswith("event:")]
            run = client.get(f"/v1/runs/{run_id}", headers=auth(key)).json()
        return {"topic": topic, "status": answer.status_code, "acked": acked, "run": run, "last": events[-1]}

    with ThreadPoolExecutor(AT_ONCE) as pool:
        results = list(pool.map(one, range(CANCELS)))

    accepted = [r for r in results if r["status"] == 202]
    assert len(accepted) >= CANCELS // 2, "most cancels should land while the duel runs"
    ignored = [r["run"]["id"] for r in accepted if r["run"]["status"] != "cancelled"]
    assert ignored == [], f"{len(ignored)} acknowledged cancel(s) ignored"
    assert all(r["last"] == "event: cancelled" for r in accepted)
    for r in accepted:
        late = [at - r["acked"] for at, transcript in arrivals if r["topic"] in transcript and at > r["acked"] + poll]
        assert late == [], f"{r['run']['id']}: model calls started {late} s after the cancel was acknowledged"
    for r in results:
        if r["status"] == 409:  # the duel had ended before the cancel came
            assert r["run"]["status"] == "completed"


async def test_a_run_told_to_stop_starts_no_model_call(parley_env, llm):
    """The guard every model call of a run inherits: once the run is told to stop, no request is sent."""
    told = []
    stopping = {"run_1": "cancel"}
    stops = SimpleNamespace(told=stopping.__contains__, still_running=told.append)
    model = ModelFactory().chat("openai:scripted")
    for call in (lambda config: model.ainvoke("Hi", config=config),
                 lambda config: model.astream("Hi", config=config).__anext__()):
        with pytest.raises(RunStopped):
            await call({"callbacks": [StopGuard(stops, "run_1")]})
    assert llm.requests == [] and told == ["run_1", "run_1"]  # and the stop was delivered again
    stopping.clear()
    assert (await model.ainvoke("Hi", config={"callbacks": [StopGuard(stops, "run_1")]})).content
    assert len(llm.requests) == 1
