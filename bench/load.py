"""A load test: duels, panel chat completions and round-table questions from N concurrent users.

Parley runs as it is deployed: `parley serve --workers W` in its own process group, on the embedded database it
starts itself, against the scripted OpenAI-compatible model server (tests/support/scripted_llm.py) at a hosted
model's pace (`--latency` before the first token, `--token-delay` between chunks). For each number of users N
and each worker count W, a fresh Parley (with a fresh database) serves N users, each a loop of requests drawn
from a seeded mix (`--seed`, `--mix`): the same seed gives every user the same sequence of requests.

The kinds of request:
  duel          POST /api/debate (SSE): a `--duel-rounds` duel; first token = the first `chunk` event
  panel         POST /v1/chat/completions, model router/debate: three panelists, then the arbitrator (JSON)
  panel-stream  the same, streamed; first token = the first content delta
  roundtable    POST /v1/conversations/{id}/message (JSON) on a new conversation: five agents and the devil's
                advocate; with `--table split` (the default) one agent disagrees, so all three rounds run

Per N and W it reports: p50/p99 time to first token and gap between chunks (streamed kinds), p50/p99
completion time per kind, errors (non-200s, error events, streams without their end), the CPU of Parley (serve
and its workers, from /proc) and of the embedded database, the database operations (Parley's /metrics,
parley_db_operations_total), the model calls the scripted server received against the calls the requests need
(measured on one request of each kind on the idle server before the load: a request with more calls than that
was re-run, e.g. taken over by another worker), and the lines of Parley's log that say "taken over by",
"lease lost" or "Traceback".

Run from the repository root:
    .venv/bin/python bench/load.py [--users 10,50,100] [--workers 1,2] [--requests-per-user 3,2,2 | --duration 60]
        [--seed 1] [--latency 0.5] [--token-delay 0.03] [--out bench/load-results]
With --out, DIR/results.json (every figure), DIR/table.md (the tables printed at the end), DIR/load.png (a plot)
and each run's Parley log (DIR/serve-u<N>-w<W>.log).
`--report DIR/results.json` prints the tables and redraws the plot of an earlier run without running anything.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import re
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.costs import Serve, cpu_seconds, make_keys, percentile, scrape_db, total_cpu_seconds  # noqa: E402
from bench.panel import ARBITRATOR, PANEL  # noqa: E402
from bench.roundtable import QUESTION as TABLE_QUESTION, TITLE, agents, script_split_table  # noqa: E402
from tests.support.duel import JUDGE_MARK, OPPONENT, OPPONENT_REPLY, SELECT_MARK, USER_REPLY, judgement  # noqa: E402
from tests.support.scripted_llm import spawn  # noqa: E402
from tests.support.sse import SseParser  # noqa: E402

KINDS = ("duel", "panel", "panel-stream", "roundtable")
STREAMED = ("duel", "panel-stream")
DEFAULT_MIX = "duel=3,panel=3,panel-stream=3,roundtable=1"
TOPIC = "Should remote work be the default?"
PANEL_QUESTION = "Explain the CAP theorem in two sentences."
LOG_PATTERNS = ("taken over by", "lease lost", "Traceback")
DB_NAME = "parley_load"
KEEPALIVE_EXPIRY = 2.0


# --------------------------------------------------------------------------- the scripted model


def script_model(base_url: str, table: str) -> None:
    """Forget earlier requests and rules; script the duel's opponent, turns and judges (everything else gets the
    scripted server's default replies), and with `table == "split"` one round-table agent against the rest."""
    control = base_url.removesuffix("/v1")
    httpx.post(control + "/_reset").raise_for_status()
    httpx.post(control + "/_script", json=[
        {"match": SELECT_MARK, "json": OPPONENT},
        {"match": JUDGE_MARK, "json": judgement("A")},
        {"match": "You are Ada,", "reply": USER_REPLY},
        {"match": f"You are {OPPONENT['name']},", "reply": OPPONENT_REPLY},
    ]).raise_for_status()
    if table == "split":
        script_split_table(base_url)


def model_requests(base_url: str) -> list[dict]:
    """Each call the scripted server has received since its reset: its transcript (every message's text) and a
    signature (the model, the start of its last message and a checksum of the transcript): a call made twice
    has the same signature twice."""
    bodies = httpx.get(base_url.removesuffix("/v1") + "/_requests", timeout=120).json()
    calls = []
    for body in bodies:
        texts = [m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                 for m in body.get("messages", [])]
        text = "\n".join(texts)
        calls.append({"text": text, "signature": f"{body.get('model')}: {(texts[-1] if texts else '')[:80]!r} "
                                                f"#{zlib.crc32(text.encode()):08x}"})
    return calls


def tags_of(call: dict) -> set[str]:
    """The request tags (`[load ...]`, put into each request's topic or question) a call carries."""
    return set(re.findall(r"\[load [^\]]+\]", call["text"]))


def calls_by_tag(calls: list[dict]) -> Counter:
    """How many calls carry each request's tag."""
    return Counter(tag for call in calls for tag in tags_of(call))


def repeated_calls(calls: list[dict], tag: str) -> dict[str, int]:
    """The calls of one request that the scripted server received more than once, by signature."""
    counts = Counter(call["signature"] for call in calls if tag in tags_of(call))
    return {signature: n for signature, n in counts.items() if n > 1}


# --------------------------------------------------------------------------- one request of each kind


@dataclass
class Result:
    """One request as its user saw it. Times in seconds from sending it; `error` is None when it succeeded."""

    kind: str
    user: int
    tag: str
    started: float = 0.0
    wall: float = 0.0
    first: float | None = None
    gaps: list[float] = field(default_factory=list)
    status: int | None = None
    error: str | None = None
    retracts: int = 0


async def sse_events(http: httpx.AsyncClient, path: str, body: dict, key: str,
                     result: Result) -> AsyncIterator[tuple[float, Any]]:
    """POST `body` to `path` and yield each SSE event with the seconds since the request was sent; a refusal is
    noted on `result` (its status always is)."""
    parser, started = SseParser(), time.perf_counter()
    async with http.stream("POST", path, json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
        result.status = resp.status_code
        if resp.status_code != 200:
            result.error = f"HTTP {resp.status_code}: {(await resp.aread()).decode(errors='replace')[:200]}"
            return
        async for line in resp.aiter_lines():
            event = parser.feed_line(line)
            if event is not None:
                yield time.perf_counter() - started, event


def chunk_came(result: Result, now: float, last: float | None) -> float:
    """Note a chunk that came `now` (the first token, or the gap since the one before at `last`)."""
    if result.first is None:
        result.first = now
    if last is not None:
        result.gaps.append(now - last)
    return now


async def duel(http: httpx.AsyncClient, key: str, result: Result, rounds: int) -> None:
    body = {"topic": f"{TOPIC} {result.tag}", "userProfile": {"name": "Ada", "bio": "Engineer"}, "rounds": rounds}
    last, done = None, False
    async for now, event in sse_events(http, "/api/debate", body, key, result):
        if event.event == "chunk":
            last = chunk_came(result, now, last)
        elif event.event in ("start", "message"):
            last = None  # the gap between two turns is the next model call's latency, not a stall
        elif event.event == "retract":
            result.retracts += 1
        elif event.event == "error":
            result.error = f"error event: {event.data[:200]}"
        elif event.event == "done":
            done = True
    if result.status == 200 and not done and result.error is None:
        result.error = "the stream ended without `done`"


async def panel(http: httpx.AsyncClient, key: str, result: Result, stream: bool) -> None:
    body = {"model": "router/debate", "messages": [{"role": "user", "content": f"{PANEL_QUESTION} {result.tag}"}]}
    if not stream:
        resp = await http.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
        result.status = resp.status_code
        if resp.status_code != 200:
            result.error = f"HTTP {resp.status_code}: {resp.text[:200]}"
        elif not resp.json()["choices"][0]["message"]["content"]:
            result.error = "an empty answer"
        return
    last, done = None, False
    async for now, event in sse_events(http, "/v1/chat/completions", {**body, "stream": True}, key, result):
        if event.data == "[DONE]":
            done = True
            continue
        data = json.loads(event.data)
        if "error" in data:
            result.error = f"error event: {event.data[:200]}"
        elif any(choice["delta"].get("content") for choice in data.get("choices", ())):
            last = chunk_came(result, now, last)
    if result.status == 200 and not done and result.error is None:
        result.error = "the stream ended without [DONE]"


async def roundtable(http: httpx.AsyncClient, key: str, result: Result) -> float:
    """Ask on a new conversation; returns when the message was sent (creating the conversation is not timed)."""
    headers = {"Authorization": f"Bearer {key}"}
    created = await http.post("/v1/conversations", json={"title": TITLE}, headers=headers)
    if created.status_code != 201:
        result.status, result.error = created.status_code, f"HTTP {created.status_code}: {created.text[:200]}"
        return time.perf_counter()
    conversation = created.json()["conversation"]["id"]
    started = time.perf_counter()
    resp = await http.post(f"/v1/conversations/{conversation}/message",
                           json={"content": f"{TABLE_QUESTION} {result.tag}"}, headers=headers)
    result.status = resp.status_code
    if resp.status_code != 200:
        result.error = f"HTTP {resp.status_code}: {resp.text[:200]}"
    return started


async def one_request(http: httpx.AsyncClient, key: str, result: Result, args: argparse.Namespace) -> Result:
    """Send the request `result` describes and fill in what its user saw."""
    started = time.perf_counter()
    try:
        if result.kind == "duel":
            await duel(http, key, result, args.duel_rounds)
        elif result.kind == "roundtable":
            started = await roundtable(http, key, result)
        else:
            await panel(http, key, result, stream=result.kind == "panel-stream")
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        result.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    result.wall = time.perf_counter() - started
    return result


# --------------------------------------------------------------------------- one run: N users, W workers


def parse_mix(text: str) -> dict[str, float]:
    mix = {kind: 0.0 for kind in KINDS}
    for part in text.split(","):
        kind, _, weight = part.partition("=")
        if kind.strip() not in mix:
            raise SystemExit(f"--mix: unknown kind {kind!r}; choose from {', '.join(KINDS)}")
        mix[kind.strip()] = float(weight)
    return mix


def requests_of(seed: int, user: int, mix: dict[str, float]):
    """The user's endless, seeded sequence of request kinds (the same seed gives the same sequence)."""
    rng = random.Random(f"{seed}:{user}")
    kinds, weights = list(mix), list(mix.values())
    while True:
        yield rng.choices(kinds, weights)[0]


async def users_load(url: str, keys: list[str], args: argparse.Namespace, per_user: int | None,
                     mix: dict[str, float]) -> list[Result]:
    """Every user's loop at once: `per_user` requests each, or new ones until `args.duration` has passed."""
    # Idle connections are dropped after 2 s, before Parley's uvicorn closes them (5 s, its default): with httpx's
    # default of 5 s both ends would race, and a request sent on a connection as it closes fails with a ReadError.
    limits = httpx.Limits(max_connections=len(keys) + 10, max_keepalive_connections=len(keys) + 10,
                          keepalive_expiry=KEEPALIVE_EXPIRY)
    results: list[Result] = []
    t0 = time.perf_counter()
    deadline = t0 + args.duration if args.duration else None

    async def user(n: int, http: httpx.AsyncClient) -> None:
        await asyncio.sleep(random.Random(f"{args.seed}:{n}:ramp").uniform(0, args.ramp))
        for i, kind in enumerate(requests_of(args.seed, n, mix)):
            if (deadline is None and i >= per_user) or (deadline is not None and time.perf_counter() >= deadline):
                return
            result = Result(kind, n, f"[load u{n} r{i}]", started=time.perf_counter() - t0)
            results.append(await one_request(http, keys[n], result, args))

    async with httpx.AsyncClient(base_url=url, timeout=args.timeout, limits=limits) as http:
        await asyncio.gather(*[user(n, http) for n in range(len(keys))])
    return results


async def warm_up(url: str, key: str, base_url: str, args: argparse.Namespace,
                  kinds: list[str]) -> dict[str, dict[str, int]]:
    """One request of each of `kinds`, one after another, on the idle server (it also loads what Parley loads on first
    use); the model calls each needed: {"kind": {"calls": all of them, "tagged": those carrying its tag}}."""
    need: dict[str, dict[str, int]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=args.timeout,
                                 limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY)) as http:
        for kind in kinds:
            script_model(base_url, args.table)
            result = await one_request(http, key, Result(kind, -1, f"[load warm {kind}]"), args)
            if result.error:
                raise RuntimeError(f"the warm-up {kind} failed: {result.error}")
            calls = model_requests(base_url)
            need[kind] = {"calls": len(calls), "tagged": calls_by_tag(calls)[result.tag],
                          "repeats": repeated_calls(calls, result.tag)}
    script_model(base_url, args.table)
    return need


def summarise(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 0.5) if values else None, "p99": percentile(values, 0.99) if values else None,
            "n": len(values)}


def run_once(users: int, workers: int, per_user: int | None, args: argparse.Namespace, base_url: str,
             scripted_pid: int, mix: dict[str, float], home: Path) -> dict:
    """Start Parley, load it with `users` users, stop it; every figure of the run."""
    env = {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-bench", "OPENAI_MODEL": "openai:gpt-4o-mini",
           "MONGODB_DB": DB_NAME, "PARLEY_DEBATE_MODELS": ",".join(PANEL), "PARLEY_ARBITRATOR_MODEL": ARBITRATOR}
    serve = Serve(home / f"u{users}-w{workers}", env, workers=workers).start()
    try:
        keys = asyncio.run(make_keys(serve.db_url, DB_NAME, users + 1, credit=1e6, user="load{i}",
                                     scopes=["chat", "debate", "conversations"]))
        for agent in agents():  # the workspace's table, as bench/roundtable.py seats it
            httpx.post(serve.url + "/v1/agents", headers={"Authorization": f"Bearer {keys[-1]}"}, timeout=30,
                       json={k: agent[k] for k in ("name", "role", "persona")}).raise_for_status()
        need = asyncio.run(warm_up(serve.url, keys[-1], base_url, args, [k for k in KINDS if mix[k] > 0]))

        pids = serve.parley_pids()
        load0 = os.getloadavg()
        cpu0 = (total_cpu_seconds(pids), cpu_seconds(serve.db_pid), cpu_seconds(scripted_pid), time.process_time())
        db0 = scrape_db(serve.url)
        t0 = time.perf_counter()
        results = asyncio.run(users_load(serve.url, keys[:users], args, per_user, mix))
        wall = time.perf_counter() - t0
        db = scrape_db(serve.url) - db0  # read before the CPU, so the scrape is not counted
        cpu1 = (total_cpu_seconds(pids), cpu_seconds(serve.db_pid), cpu_seconds(scripted_pid), time.process_time())
        load1 = os.getloadavg()
        calls = model_requests(base_url)
    finally:
        serve.stop()
    log = serve.log_text()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"serve-u{users}-w{workers}.log").write_text(log)

    tagged = calls_by_tag(calls)
    kinds = {}
    for kind in KINDS:
        mine = [r for r in results if r.kind == kind]
        ok = [r for r in mine if r.error is None]
        kinds[kind] = {
            "requests": len(mine), "errors": len(mine) - len(ok),
            "first": summarise([r.first for r in ok if r.first is not None]) if kind in STREAMED else None,
            "gap": summarise([g for r in ok for g in r.gaps]) if kind in STREAMED else None,
            "wall": summarise([r.wall for r in ok]),
            # a request whose tag is in more calls than the idle one's was re-run (at least in part)
            "repeated": sum(tagged[r.tag] > need[kind]["tagged"] for r in mine),
            "retracts": sum(r.retracts for r in mine),
        }
    ok_needed = sum(need[r.kind]["calls"] for r in results if r.error is None)
    failed_seen = sum(tagged[r.tag] for r in results if r.error is not None)
    errors = Counter(re.sub(r"\d+", "N", r.error)[:120] for r in results if r.error)
    return {
        "users": users, "workers": workers, "requests_per_user": per_user, "duration": args.duration,
        "wall": wall, "requests": len(results), "errors": sum(errors.values()), "error_kinds": dict(errors),
        "kinds": kinds,
        "cpu": {"parley": cpu1[0] - cpu0[0], "db": cpu1[1] - cpu0[1], "model": cpu1[2] - cpu0[2],
                "clients": cpu1[3] - cpu0[3]},
        "db_ops": db.total_ops, "db_ops_by": {f"{c} {m}": v for (c, m), v in sorted(db.ops.items())},
        "model_calls": {"seen": len(calls), "needed": ok_needed, "of_failed_requests": failed_seen,
                        "need_per_request": {k: v["calls"] for k, v in need.items()},
                        "tagged_per_request": {k: v["tagged"] for k, v in need.items()},
                        "repeats_per_idle_request": {k: v["repeats"] for k, v in need.items()}},
        "log": {pattern: log.count(pattern) for pattern in LOG_PATTERNS},
        "load_average": [load0[0], load1[0]],
        "requests_seen": [{**asdict(r), "gaps": len(r.gaps), "calls": tagged[r.tag]} for r in results],
        # what a re-run request asked twice
        "repeated": {r.tag: repeated_calls(calls, r.tag) for r in results
                     if tagged[r.tag] > need[r.kind]["tagged"]},
    }


# --------------------------------------------------------------------------- the report


def ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f}"


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def markdown(report: dict) -> str:
    """The two tables of the doc: latencies per kind, and costs and counts per run."""
    lines = ["| users | workers | kind | requests | errors | first token p50 / p99 (s) | gap between chunks "
             "p50 / p99 (ms) | completion p50 / p99 (s) |", "|---|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        for kind, k in run["kinds"].items():
            if not k["requests"]:
                continue
            first = f"{seconds(k['first']['p50'])} / {seconds(k['first']['p99'])}" if k["first"] else "–"
            gap = f"{ms(k['gap']['p50'])} / {ms(k['gap']['p99'])}" if k["gap"] else "–"
            lines.append(f"| {run['users']} | {run['workers']} | {kind} | {k['requests']} | {k['errors']} | {first} | "
                         f"{gap} | {seconds(k['wall']['p50'])} / {seconds(k['wall']['p99'])} |")
    lines += ["", "| users | workers | requests | errors | wall (s) | Parley CPU (s) | database CPU (s) | "
              "database ops (per request) | model calls seen / needed | re-run requests | log: taken over / lease "
              "lost / Traceback | load average |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        calls, log = run["model_calls"], run["log"]
        rerun = sum(k["repeated"] for k in run["kinds"].values())
        extra = f" (+{calls['of_failed_requests']} for failed)" if calls["of_failed_requests"] else ""
        lines.append(
            f"| {run['users']} | {run['workers']} | {run['requests']} | {run['errors']} | {run['wall']:.1f} | "
            f"{run['cpu']['parley']:.1f} | {run['cpu']['db']:.1f} | {run['db_ops']:.0f} "
            f"({run['db_ops'] / max(run['requests'], 1):.1f}) | {calls['seen']} / {calls['needed']}{extra} | {rerun} | "
            f"{log['taken over by']} / {log['lease lost']} / {log['Traceback']} | "
            f"{run['load_average'][0]:.1f} → {run['load_average'][1]:.1f} |")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """Four panels against the number of users, one line per kind and worker count (2 workers dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    workers = sorted({r["workers"] for r in runs})
    colours = dict(zip(KINDS, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=True))
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), dpi=80)

    def lines(ax, kinds, value, title, unit):
        for kind in kinds:
            for w in workers:
                mine = sorted((r for r in runs if r["workers"] == w and r["kinds"][kind][value[0]]),
                              key=lambda r: r["users"])
                xs = [r["users"] for r in mine if r["kinds"][kind][value[0]][value[1]] is not None]
                ys = [r["kinds"][kind][value[0]][value[1]] * unit for r in mine
                      if r["kinds"][kind][value[0]][value[1]] is not None]
                if xs:
                    ax.plot(xs, ys, marker="o", color=colours[kind], linestyle="-" if w == workers[0] else "--",
                            label=f"{kind}, {w} worker{'s' if w > 1 else ''}")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)

    lines(axes[0][0], STREAMED, ("first", "p99"), "p99 time to first token (s)", 1)
    lines(axes[0][1], STREAMED, ("gap", "p99"), "p99 gap between chunks (ms)", 1000)
    lines(axes[1][0], KINDS, ("wall", "p99"), "p99 completion time (s)", 1)
    ax = axes[1][1]
    for w in workers:
        mine = sorted((r for r in runs if r["workers"] == w), key=lambda r: r["users"])
        style = "-" if w == workers[0] else "--"
        ax.plot([r["users"] for r in mine], [r["cpu"]["parley"] * 1000 / max(r["requests"], 1) for r in mine],
                marker="o", color="tab:purple", linestyle=style, label=f"Parley, {w} worker{'s' if w > 1 else ''}")
        ax.plot([r["users"] for r in mine], [r["cpu"]["db"] * 1000 / max(r["requests"], 1) for r in mine],
                marker="s", color="tab:brown", linestyle=style, label=f"database, {w} worker{'s' if w > 1 else ''}")
    ax.set_title("CPU per request (ms)", fontsize=10)
    ax.grid(alpha=0.3)
    for ax in axes.flat:
        ax.legend(fontsize=7)
        ax.set_ylim(bottom=0)
        ax.set_xticks(sorted({r["users"] for r in runs}))
        ax.set_xlabel("concurrent users")
    config = report["config"]
    fig.suptitle(f"Parley under load: {config['latency'] * 1000:.0f} ms to first token, "
                 f"{config['token_delay'] * 1000:.0f} ms per chunk, mix {config['mix']}", fontsize=10)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    from PIL import Image  # matplotlib's own dependency; a 256-colour palette keeps the committed PNG small

    Image.open(buffer).convert("RGB").quantize(colors=256).save(path, optimize=True)


def write_report(report: dict, out: Path | None) -> None:
    table = markdown(report)
    print("\n" + table)
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=1))
    (out / "table.md").write_text(table + "\n")
    try:
        plot(report, out / "load.png")
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[eval]'): no plot", file=sys.stderr)
    print(f"\nwritten: {out / 'results.json'}, {out / 'table.md'}, {out / 'load.png'}")


def line(run: dict) -> str:
    """One run's summary, printed as it ends."""
    k = run["kinds"]
    parts = [f"{kind} {k[kind]['requests']}" + (f" ({k[kind]['errors']} failed)" if k[kind]["errors"] else "")
             for kind in KINDS if k[kind]["requests"]]
    duel_first = k["duel"]["first"]["p99"] if k["duel"]["first"] else None
    return (f"{run['users']} users, {run['workers']} worker(s): {run['requests']} requests in {run['wall']:.1f} s "
            f"({', '.join(parts)}); duel first token p99 {seconds(duel_first)} s; CPU Parley "
            f"{run['cpu']['parley']:.1f} s, database {run['cpu']['db']:.1f} s (scripted model {run['cpu']['model']:.1f} s, "
            f"clients {run['cpu']['clients']:.1f} s); {run['db_ops']:.0f} database ops; "
            f"model calls {run['model_calls']['seen']} / {run['model_calls']['needed']} needed; log "
            + ", ".join(f"{p!r} {n}" for p, n in run["log"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", default="10,50,100", help="concurrent users, one run per value")
    parser.add_argument("--workers", default="1,2", help="`parley serve --workers`, one run per value and --users")
    parser.add_argument("--requests-per-user", default="3,2,2",
                        help="requests in each user's loop: one value, or one per --users value")
    parser.add_argument("--duration", type=float, default=0.0,
                        help="instead: seconds during which each user starts new requests (they all finish)")
    parser.add_argument("--seed", type=int, default=1, help="seeds every user's sequence of requests")
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"relative weights of the kinds ({DEFAULT_MIX})")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds before each model call's first token")
    parser.add_argument("--token-delay", type=float, default=0.03, help="seconds between a model call's chunks")
    parser.add_argument("--duel-rounds", type=int, default=2)
    parser.add_argument("--table", choices=("split", "agree"), default="split",
                        help="split: one agent disagrees, all three rounds run; agree: the table may converge early")
    parser.add_argument("--ramp", type=float, default=1.0, help="users start at random moments within this many s")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a request counts as failed")
    parser.add_argument("--out", type=Path, help="folder for results.json, table.md and load.png")
    parser.add_argument("--report", type=Path, help="only print the tables (and plot to --out) of this results.json")
    args = parser.parse_args()

    if args.report:
        write_report(json.loads(args.report.read_text()), args.out)
        return
    users = [int(u) for u in args.users.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    per_user = [int(n) for n in args.requests_per_user.split(",")]
    if len(per_user) == 1 or args.duration:
        per_user = per_user[:1] * len(users)  # with --duration, not used
    if len(per_user) != len(users):
        raise SystemExit("--requests-per-user: one value, or one per --users value")
    mix = parse_mix(args.mix)
    report = {"config": {"latency": args.latency, "token_delay": args.token_delay, "mix": args.mix,
                         "seed": args.seed, "duel_rounds": args.duel_rounds, "table": args.table,
                         "ramp": args.ramp, "cores": os.cpu_count(), "at": datetime.now(UTC).isoformat(),
                         "command": " ".join(sys.argv)}, "runs": []}
    print(f"scripted model: {args.latency * 1000:.0f} ms to the first token, {args.token_delay * 1000:.0f} ms per "
          f"chunk; mix {args.mix}; seed {args.seed}; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    scripted, base_url = spawn(latency=args.latency, token_delay=args.token_delay)
    try:
        with tempfile.TemporaryDirectory(prefix="parley-load-") as tmp:
            for n, count in zip(users, per_user, strict=True):
                for w in workers:
                    run = run_once(n, w, None if args.duration else count, args, base_url, scripted.pid, mix,
                                   Path(tmp))
                    report["runs"].append(run)
                    print(line(run), flush=True)
    finally:
        scripted.terminate()
        scripted.wait(10)
    write_report(report, args.out)


if __name__ == "__main__":
    main()
