/**
 * Panel: ask a router's panel a question. The answer is requested as OpenAI-compatible streamed chat
 * completions; the side-by-side view follows the run's own events (`X-Run-Id`), which carry each
 * panelist's answer and figures.
 */
import { useEffect, useRef, useState } from "react";

import { authHeaders, ApiError, errorMessage } from "../../api/client";
import { TERMINAL_EVENTS } from "../../api/sse";
import { ErrorNote } from "../../components/ui";
import { useSession } from "../../session/session";
import { emptyPanel, panelReducer } from "../../streams/panel";
import { useFollow } from "../../streams/useFollow";
import { useStreamReducer } from "../../streams/useStream";
import { PanelViewer } from "./PanelViewer";

const PRESET = "router/debate";

interface RouterInfo {
  id: string;
}

/** The routers this key can see (`admin` keys list them; others get the preset). */
function useRouters(): string[] {
  const { api, allows } = useSession();
  const [routers, setRouters] = useState<string[]>([PRESET]);
  useEffect(() => {
    if (!allows("admin")) return;
    let live = true;
    api<{ data: RouterInfo[] }>("/v1/routers").then(
      (r) => live && setRouters(Array.from(new Set([PRESET, ...r.data.map((x) => `router/${x.id}`)]))),
      () => undefined, // the preset alone still works
    );
    return () => {
      live = false;
    };
  }, [api, allows]);
  return routers;
}

/**
 * Start the completion and resolve to its run id once the response's headers arrive. The body is
 * read to its end in the background: the OpenAI stream is kept open so the request runs as a
 * client would run it, while the view draws from the run's events.
 */
async function startCompletion(key: string, body: unknown, signal: AbortSignal): Promise<string> {
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: authHeaders(key, { "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) {
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON: keep the text */
    }
    throw new ApiError(response.status, errorMessage(parsed, response.status), parsed);
  }
  const runId = response.headers.get("X-Run-Id");
  void response.body?.pipeTo(new WritableStream()).catch(() => undefined);
  if (!runId) throw new Error("The server did not name the run (no X-Run-Id header)");
  return runId;
}

export function PanelPage() {
  const { key, writes } = useSession();
  const routers = useRouters();
  const [question, setQuestion] = useState("");
  const [router, setRouter] = useState(PRESET);
  const [mode, setMode] = useState<"debate" | "panel">("debate");
  const [view, push, reset] = useStreamReducer(panelReducer, emptyPanel);
  const stream = useFollow();
  const [error, setError] = useState<unknown>(null);
  const [starting, setStarting] = useState(false);
  const request = useRef<AbortController | null>(null);

  useEffect(() => () => request.current?.abort(), []);

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    if (!question.trim()) {
      setError("Write a question first.");
      return;
    }
    setError(null);
    reset();
    request.current?.abort();
    request.current = new AbortController();
    const body = {
      model: router,
      messages: [{ role: "user", content: question.trim() }],
      stream: true,
      ...(mode === "panel" ? { panel: true } : { debate: true }),
    };
    setStarting(true);
    let runId: string;
    try {
      runId = await startCompletion(key, body, request.current.signal);
    } catch (err) {
      setError(err);
      return;
    } finally {
      setStarting(false);
    }
    const url = `/v1/runs/${encodeURIComponent(runId)}/events`;
    void stream.start(key, { start: { url }, resume: () => ({ url }), terminal: TERMINAL_EVENTS, onEvent: push });
  }

  const busy = starting || stream.running;
  return (
    <div className="area">
      <h1>Panel</h1>
      <p className="lede">One question to several models at once; in debate mode an arbitrator writes the best answer.</p>
      {!writes("chat") && <p className="error">This key cannot ask panels: it needs the <code>chat</code> scope.</p>}
      <form className="card form-grid" onSubmit={submit} aria-label="Ask a panel">
        <label htmlFor="panel-question">Question</label>
        <textarea id="panel-question" rows={3} value={question} onChange={(e) => setQuestion(e.target.value)} />
        <label htmlFor="panel-router">Router</label>
        <select id="panel-router" value={router} onChange={(e) => setRouter(e.target.value)}>
          {routers.map((r) => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
        <span id="panel-mode-label">Mode</span>
        <div role="radiogroup" aria-labelledby="panel-mode-label" className="radios">
          <label>
            <input type="radio" name="panel-mode" checked={mode === "debate"} onChange={() => setMode("debate")} /> Debate:
            an arbitrator answers
          </label>
          <label>
            <input type="radio" name="panel-mode" checked={mode === "panel"} onChange={() => setMode("panel")} /> Panel:
            every answer, labelled
          </label>
        </div>
        <span />
        <div className="actions">
          <button type="submit" disabled={busy || !writes("chat")}>
            {busy ? "Asking…" : "Ask the panel"}
          </button>
        </div>
      </form>
      <ErrorNote error={error ?? stream.error} />
      {(busy || view.seats.length > 0 || view.status !== "waiting") && <PanelViewer view={view} />}
    </div>
  );
}
