"""Which of Parley's database commands each run sends, by the code that sends it.

`parley_db_operations_total` counts commands by collection and command; this bench names the function
behind each one (`store.runs.renew_leases ← LeaseKeeper._run`, the checkpointer's `RunSaver.aput_writes`,
...), so the cost of each of the run engine's writes and polls can be read apart: the checkpoint of
every step, each task's checkpoint writes, the event batches, the run record's updates, the usage rows,
the lease renewals (which read the cancel requests too), the take-over looks, the followers' polls and the deletion of the
checkpoints. Parley runs in this process (a `pymongo.monitoring` listener registered before its clients
are built walks the stack of each command); the embedded database and the scripted model run as their
own processes. It measures

- `--panel N` panel requests one after another (3 panelists + 1 arbitrator),
- `--duel N` 5-round duels one after another (SSE, `--rounds`),
- `--roundtable N` round-table questions one after another (5 agents + devil's advocate, 3 rounds, as in
  bench/roundtable.py),
- what the engine asks while it holds no run, over `--idle` seconds,

and prints, per run, each (caller, collection, command): operations and KB sent and received.

Run from the repository root:  .venv/bin/python bench/dbcalls.py [--panel 5] [--duel 3] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bson  # noqa: E402
import httpx  # noqa: E402
from pymongo import monitoring  # noqa: E402

OWN = ("store", "runs", "api", "nodes", "graphs")


def caller(frame) -> str:
    """The function that sent a command (Parley's, its checkpointer's among them, or limits') and, when another
    module of Parley's called it, that one: `store.runs.next_expiring ← runs.leases.TakeOvers._loop`."""
    inner = outer = None
    while frame is not None and outer is None:
        path, name = frame.f_code.co_filename, None
        rel = path[len(str(ROOT)) + 1:] if path.startswith(str(ROOT)) else ""
        if rel.startswith(OWN) and not rel.endswith("store/monitor.py"):
            name = rel.removesuffix(".py").replace("/", ".") + "." + getattr(frame.f_code, "co_qualname",
                                                                             frame.f_code.co_name)
        elif inner is None and "/limits/" in path:
            name = "limits." + frame.f_code.co_name
        if name is not None:
            if inner is None:
                inner = name
            elif name.rsplit(".", 1)[0].split(".")[:2] != inner.rsplit(".", 1)[0].split(".")[:2]:
                outer = name
        frame = frame.f_back
    return f"{inner} ← {outer}" if outer else (inner or "?")


class CallerTally(monitoring.CommandListener):
    """Operations and bytes by (caller, collection, command)."""

    def __init__(self) -> None:
        self.pending: dict[tuple, tuple[str, str, str, int]] = {}
        self.ops: dict[tuple[str, str, str], int] = defaultdict(int)
        self.sent: dict[tuple[str, str, str], int] = defaultdict(int)
        self.received: dict[tuple[str, str, str], int] = defaultdict(int)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        from parley.store.monitor import _labels

        collection, command = _labels(event.command_name, event.command)
        self.pending[(event.connection_id, event.request_id)] = (
            caller(sys._getframe(1)), collection, command, len(bson.encode(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._end(event, len(bson.encode(event.reply)))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._end(event, 0)

    def _end(self, event, received: int) -> None:
        found = self.pending.pop((event.connection_id, event.request_id), None)
        if found:
            who, collection, command, sent = found
            key = (who, collection, command)
            self.ops[key] += 1
            self.sent[key] += sent
            self.received[key] += received

    def snapshot(self) -> tuple[dict, dict, dict]:
        return dict(self.ops), dict(self.sent), dict(self.received)


def report(title: str, before: tuple, after: tuple, per: int, db_cpu: float) -> None:
    ops = {k: v - before[0].get(k, 0) for k, v in after[0].items() if v - before[0].get(k, 0)}
    sent = {k: after[1][k] - before[1].get(k, 0) for k in ops}
    received = {k: after[2][k] - before[2].get(k, 0) for k in ops}
    total = sum(ops.values())
    print(f"\n{title}: {total / per:.1f} operations, {sum(sent.values()) / per / 1024:.1f} KB sent, "
          f"{sum(received.values()) / per / 1024:.1f} KB received, database CPU {db_cpu * 1000 / per:.0f} ms "
          f"per run ({per} runs)")
    print(f"  {'ops/run':>7} {'KB sent':>8} {'KB recv':>8}  {'collection':<18} {'command':<13} caller")
    for key in sorted(ops, key=lambda k: (-ops[k], k)):
        who, collection, command = key
        print(f"  {ops[key] / per:7.1f} {sent[key] / per / 1024:8.2f} {received[key] / per / 1024:8.2f}  "
              f"{collection:<18} {command:<13} {who}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--panel", type=int, default=5, help="panel requests one after another")
    parser.add_argument("--duel", type=int, default=3, help="duels one after another")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--roundtable", type=int, default=1, help="round-table questions one after another")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds before each model call's first token")
    parser.add_argument("--token-delay", type=float, default=0.005, help="seconds between streamed chunks")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds to watch the engine hold nothing")
    parser.add_argument("--durability", choices=["async", "sync", "exit"], default=None,
                        help="LangGraph's durability for every run, past PARLEY_RUN_DURABILITY's choices: 'exit' "
                             "saves only when the graph ends, to see what checkpointing each step costs "
                             "(a run killed mid-way then starts over: an experiment, not a setting)")
    parser.add_argument("--poll", type=float, default=None,
                        help="PARLEY_RUN_POLL for the experiment (cancel polls; default: the setting's)")
    parser.add_argument("--write-after", type=float, default=None,
                        help="every mode's store_every for the experiment: seconds between event batches")
    args = parser.parse_args()

    tally = CallerTally()
    monitoring.register(tally)  # every client built from now on, Parley's included

    from parley.api.main import create_app
    from bench.costs import cpu_seconds
    from bench.duel import TURN, one_debate, script
    from bench.panel import ARBITRATOR, PANEL, panel_request, provision
    from parley.core.embedded import database_server
    from parley.core.settings import Settings
    from parley.store import connect
    from parley.store.keys import create_key
    from tests.support.scripted_llm import spawn
    from tests.support.servers import ServerThread, run_sync

    scripted, base_url = spawn(latency=args.latency, token_delay=args.token_delay)
    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    db_server = database_server(home / "db").start(timeout=90)
    settings = Settings(_env_file=None, openai_base_url=base_url, openai_api_key="sk-bench",
                        openai_model="openai:gpt-4o-mini", mongodb_uri=db_server.url, mongodb_db="bench",
                        parley_home=home, parley_debate_models=PANEL, parley_arbitrator_model=ARBITRATOR)
    if args.durability:
        settings = settings.model_copy(update={"parley_run_durability": args.durability})
    if args.poll:
        settings = settings.model_copy(update={"parley_run_poll": args.poll})
    from parley.runs.modes import MODES

    if args.write_after:
        for mode in MODES.values():
            mode.store_every = args.write_after
    batches = ", ".join(f"{kind} {mode.store_every:g} s" for kind, mode in MODES.items())
    print(f"scripted model: {args.latency * 1000:.0f} ms before the first token, {args.token_delay * 1000:.0f} ms "
          f"between chunks; poll {settings.parley_run_poll} s, heartbeat {settings.parley_run_heartbeat} s, "
          f"durability {settings.parley_run_durability}, event batches every {batches}", flush=True)

    async def debate_keys(count: int) -> list[str]:
        client, db = connect(db_server.url, "bench")
        try:
            return [(await create_key(db, user=f"duel{i}", workspace="bench", scopes=["debate", "conversations"]))[1]
                    for i in range(count)]
        finally:
            await client.close()

    async def round_tables(http: httpx.AsyncClient, key: str) -> None:
        from bench.roundtable import QUESTION, TITLE, agents, script_split_table

        httpx.post(base_url.removesuffix("/v1") + "/_reset").raise_for_status()
        script_split_table(base_url)
        headers = {"x-api-key": key}
        for agent in agents():
            (await http.post("/v1/agents", json={k: agent[k] for k in ("name", "role", "persona")},
                             headers=headers)).raise_for_status()
        conversations = [(await http.post("/v1/conversations", json={"title": TITLE},
                                          headers=headers)).json()["conversation"] for _ in range(args.roundtable)]
        before, walls, cpu0 = tally.snapshot(), [], db_cpu()
        for conversation in conversations:
            started = time.perf_counter()
            resp = await http.post(f"/v1/conversations/{conversation['id']}/message", json={"content": QUESTION},
                                   headers=headers)
            resp.raise_for_status()
            walls.append(time.perf_counter() - started)
        await asyncio.sleep(2 * settings.parley_run_heartbeat)
        report(f"round-table question (3 rounds, 6 seats; median wall {sorted(walls)[len(walls) // 2]:.2f} s; "
               f"the conversation's creation not counted)", before, tally.snapshot(), args.roundtable, db_cpu() - cpu0)

    def db_cpu() -> float:
        return cpu_seconds(db_server.process.pid)

    try:
        chat_key = run_sync(lambda: provision(db_server.url))
        duel_keys = run_sync(lambda: debate_keys(args.duel + 2))
        script(base_url, TURN)
        with ServerThread(create_app(settings)) as server:

            async def drive() -> None:
                async with (httpx.AsyncClient(base_url=server.url, timeout=300,
                                              headers={"Authorization": f"Bearer {chat_key}"}) as http,
                            httpx.AsyncClient(base_url=server.url, timeout=300) as duel_http):
                    await panel_request(http)  # warm-up
                    await one_debate(duel_http, duel_keys.pop(), 1)
                    await asyncio.sleep(2 * settings.parley_run_heartbeat)  # let the warm-up's ends settle
                    before, cpu0 = tally.snapshot(), db_cpu()
                    started = time.perf_counter()
                    await asyncio.sleep(args.idle)
                    report(f"engine holding no run, per second ({time.perf_counter() - started:.1f} s)",
                           before, tally.snapshot(), max(1, round(time.perf_counter() - started)), db_cpu() - cpu0)
                    if args.panel:
                        before, walls, cpu0 = tally.snapshot(), [], db_cpu()
                        for _ in range(args.panel):
                            walls.append(await panel_request(http))
                        await asyncio.sleep(2 * settings.parley_run_heartbeat)  # checkpoint deletion included
                        report(f"panel request (JSON; median wall {sorted(walls)[len(walls) // 2] * 1000:.0f} ms, "
                               f"+{2 * settings.parley_run_heartbeat:.0f} s idle after the last)", before,
                               tally.snapshot(), args.panel, db_cpu() - cpu0)
                    if args.duel:
                        before, walls, cpu0 = tally.snapshot(), [], db_cpu()
                        for _ in range(args.duel):
                            walls.append((await one_debate(duel_http, duel_keys.pop(), args.rounds))["wall"])
                        await asyncio.sleep(2 * settings.parley_run_heartbeat)
                        report(f"{args.rounds}-round duel (SSE; median wall {sorted(walls)[len(walls) // 2]:.2f} s)",
                               before, tally.snapshot(), args.duel, db_cpu() - cpu0)
                    if args.roundtable:
                        await round_tables(duel_http, duel_keys.pop())

            asyncio.run(drive())
    finally:
        db_server.stop()
        scripted.terminate()
        scripted.wait(10)


if __name__ == "__main__":
    main()
