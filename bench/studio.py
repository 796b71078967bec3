"""Benchmark Parley Studio in headless Chromium: time to first paint of `/`, and the duel viewer's frame rate
while 100 chunks a second stream in.

Parley, the scripted model and the embedded database run as separate processes; Debian's Chromium is driven
by Playwright (PARLEY_CHROMIUM, else /usr/bin/chromium). Prints:
  (a) first paint and first contentful paint of `/` in a fresh browser context (no cache), signed out (the
      sign-in form) and signed in (the key checked with GET /v1/me, then the Duel form), median and max of N;
  (b) while a duel streams one-word chunks at 100 a second: frames per second, gaps between frames
      (p50, p95, max), long tasks (> 50 ms on the main thread) in that time, and the chunk rate received.

    .venv/bin/python bench/studio.py [--loads 7] [--token-delay 0.01] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.costs import make_keys, percentile, start_process  # noqa: E402
from bench.duel import MANY_CHUNKS, script  # noqa: E402
from parley.core.embedded import database_server, free_port  # noqa: E402

CHROMIUM = os.environ.get("PARLEY_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
CHUNKS_PER_TURN = MANY_CHUNKS.count(".")

# Records every animation frame, main-thread long tasks, and when the duel's first turn and its judging
# appear on screen (a MutationObserver, so the times are the page's own).
RECORDER = """
window.__frames = [];
const tick = (t) => { window.__frames.push(t); requestAnimationFrame(tick); };
requestAnimationFrame(tick);
window.__long = [];
new PerformanceObserver((list) => list.getEntries().forEach((e) => window.__long.push([e.startTime, e.duration])))
  .observe({ type: "longtask", buffered: true });
new MutationObserver(() => {
  if (window.__firstTurn === undefined && document.querySelector(".turn-text")?.textContent)
    window.__firstTurn = performance.now();
  if (window.__judging === undefined && document.querySelector(".status")?.textContent?.includes("judges"))
    window.__judging = performance.now();
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


def paints(browser, url: str, key: str | None, loads: int) -> dict[str, list[float]]:
    """First paint, first contentful paint and the first form's appearance, over `loads` cold loads."""
    out: dict[str, list[float]] = {"first-paint": [], "first-contentful-paint": [], "form": []}
    for _ in range(loads):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        if key:
            context.add_init_script(f"localStorage.setItem('parley.apiKey', {json.dumps(key)})")
        context.add_init_script("""new MutationObserver(() => {
          if (window.__form === undefined && document.querySelector('form')) window.__form = performance.now();
        }).observe(document, { subtree: true, childList: true });""")
        page = context.new_page()
        page.goto(url + ("/duel" if key else "/"))
        page.wait_for_selector("form")
        for entry in page.evaluate("performance.getEntriesByType('paint').map(e => [e.name, e.startTime])"):
            out[entry[0]].append(entry[1])
        out["form"].append(page.evaluate("window.__form"))
        context.close()
    return out


def frame_rate(browser, url: str, key: str, rounds: int) -> dict:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(f"localStorage.setItem('parley.apiKey', {json.dumps(key)})")
    context.add_init_script(RECORDER)
    page = context.new_page()
    page.goto(url + "/duel")
    page.get_by_label("Topic").fill("Should remote work be the default?")
    page.get_by_label("Persona name").fill("Ada")
    page.get_by_label("Rounds").fill(str(rounds))
    page.get_by_role("button", name="Start the duel").click()
    page.get_by_test_id("winner").wait_for(timeout=300_000)
    found = page.evaluate("({frames: window.__frames, long: window.__long, t0: window.__firstTurn, t1: window.__judging})")
    context.close()
    t0, t1 = found["t0"], found["t1"]
    frames = [t for t in found["frames"] if t0 <= t <= t1]
    gaps = [b - a for a, b in zip(frames, frames[1:])]
    seconds = (t1 - t0) / 1000
    long_tasks = [duration for start, duration in found["long"] if t0 <= start <= t1]
    return {"seconds": seconds, "fps": len(frames) / seconds, "gaps": gaps, "long": long_tasks,
            "chunks_per_s": rounds * 2 * CHUNKS_PER_TURN / seconds}


def measure(args: argparse.Namespace, home: Path, uri: str, started: list[subprocess.Popen]) -> None:
    db_name = "bench_" + uuid.uuid4().hex[:8]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MONGODB_", "PARLEY_"))}
    env["PYTHONPATH"] = str(ROOT)
    llm, ready = start_process([sys.executable, "-m", "tests.support.scripted_llm", "--port", "0",
                                "--token-delay", str(args.token_delay)], env, "READY")
    started.append(llm)
    base_url = ready.split()[1]
    script(base_url, MANY_CHUNKS)
    port = free_port()
    parley_env = {**env, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "x", "OPENAI_MODEL": "openai:gpt-4o-mini",
                  "MONGODB_URI": uri, "MONGODB_DB": db_name, "PARLEY_HOME": str(home)}
    parley, _ = start_process([sys.executable, "-m", "uvicorn", "parley.api.main:create_app", "--factory", "--host",
                               "127.0.0.1", "--port", str(port), "--log-level", "warning"], parley_env, None)
    started.append(parley)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/openapi.json").status_code == 200:
                break
        except httpx.TransportError:
            pass
        asyncio.run(asyncio.sleep(0.1))
    key = asyncio.run(make_keys(uri, db_name, 1, scopes=["admin"], user="bench"))[0]

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        paints(browser, url, None, 1)  # warm-up: the server's first requests, Chromium's first page
        for label, who in (("signed out, /", None), ("signed in, /duel", key)):
            found = paints(browser, url, who, args.loads)
            figures = "   ".join(f"{name} median {statistics.median(v):.0f} ms, max {max(v):.0f} ms"
                                 for name, v in found.items())
            print(f"(a) {label} ({args.loads} cold loads): {figures}")
        result = frame_rate(browser, url, key, args.rounds)
        browser.close()
    gaps = result["gaps"]
    print(f"(b) duel viewer, {args.rounds} rounds x 2 turns x {CHUNKS_PER_TURN} chunks, "
          f"{args.token_delay * 1000:.0f} ms between chunks: {result['chunks_per_s']:.0f} chunks/s received over "
          f"{result['seconds']:.1f} s")
    longest = f" (longest {max(result['long']):.0f} ms)" if result["long"] else ""
    print(f"    {result['fps']:.1f} frames/s; gap between frames p50 {percentile(gaps, 0.5):.1f} ms, "
          f"p95 {percentile(gaps, 0.95):.1f} ms, max {max(gaps):.1f} ms; long tasks: {len(result['long'])}{longest}")


def run(args: argparse.Namespace) -> None:
    """Start the database, the scripted model and Parley; measure; stop them whatever happens."""
    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    started: list[subprocess.Popen] = []
    db_server = None
    try:
        uri = os.environ.get("MONGODB_URI")
        if not uri:
            db_server = database_server(home).start(timeout=90)
            uri = db_server.url
        measure(args, home, uri, started)
    finally:
        for proc in reversed(started):
            proc.send_signal(signal.SIGINT)
        for proc in started:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if db_server is not None:
            db_server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", type=int, default=7, help="cold page loads per case in (a)")
    parser.add_argument("--token-delay", type=float, default=0.01, help="seconds between streamed chunks (0.01: 100/s)")
    parser.add_argument("--rounds", type=int, default=5)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
