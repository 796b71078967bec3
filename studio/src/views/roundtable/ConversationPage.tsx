/** One conversation: every question put to the table so far, and a box to ask the next one live. */
import { useCallback, useEffect, useState } from "react";
import { Link, useParams } from "react-router";

import { TERMINAL_EVENTS } from "../../api/sse";
import { budgetBody, SteerPanel, type SteerState } from "../../components/SteerPanel";
import { ErrorNote, FollowNote } from "../../components/ui";
import { useSession } from "../../session/session";
import { emptyExchange, exchangeReducer, exchangesOf, type Conversation, type Exchange } from "../../streams/roundtable";
import { useFollow } from "../../streams/useFollow";
import { useStreamReducer } from "../../streams/useStream";
import { ExchangeView } from "./ExchangeView";

/** Where the live exchange stands for steering: from its events, and the pause or end just asked for. */
function steerState(exchange: Exchange, asked: string | null): SteerState {
  if (exchange.status === "done" || exchange.status === "failed" || exchange.synthesis) return "ended";
  if (exchange.status === "waiting") return "waiting";
  if (asked === "end") return "ending";
  return asked === "pause" ? "pausing" : "running";
}

export default function ConversationPage() {
  const { id = "" } = useParams();
  const { key, api, writes } = useSession();
  const [conversation, setConversation] = useState<Conversation | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [question, setQuestion] = useState("");
  const [asked, setAsked] = useState<string | null>(null);
  const [live, push, reset] = useStreamReducer(exchangeReducer, emptyExchange);
  const stream = useFollow();
  const [budget, setBudget] = useState("");
  const [wait, setWait] = useState(false);
  const [runId, setRunId] = useState<string | null>(null);
  const [steered, setSteered] = useState<string | null>(null);
  useEffect(() => {
    if (live.status === "waiting" || live.synthesis) setSteered(null);  // the pause (or end) took effect
  }, [live.status, live.synthesis]);

  const load = useCallback(async (): Promise<Conversation | null> => {
    try {
      return (await api<{ conversation: Conversation }>(`/v1/conversations/${encodeURIComponent(id)}`)).conversation;
    } catch (err) {
      setError(err);
      return null;
    }
  }, [api, id]);

  useEffect(() => {
    let live = true;
    void load().then((c) => live && c && setConversation(c));
    return () => {
      live = false;
    };
  }, [load]);

  async function ask(event: React.FormEvent) {
    event.preventDefault();
    const content = question.trim();
    if (!content) return;
    reset(emptyExchange(content));
    setAsked(content);
    setQuestion("");
    setRunId(null);
    setSteered(null);
    let finished = false;
    let runId: string | null = null;
    const body = { content, ...budgetBody(budget), ...(wait ? { await: "after_round" } : {}) };
    await stream.start(key, {
      start: { url: `/v1/conversations/${encodeURIComponent(id)}/message?stream=true`, method: "POST", body },
      // A dropped connection resumes on the run's event log, after the last event shown.
      resume: () => (runId ? { url: `/v1/runs/${encodeURIComponent(runId)}/events` } : null),
      onOpen(response) {
        runId = runId ?? response.headers.get("X-Run-Id");
        setRunId(runId);
      },
      terminal: TERMINAL_EVENTS,
      onEvent(event) {
        finished ||= event.event === "done";
        push(event);
      },
    });
    // The stored transcript now holds the exchange: show that one instead of the live copy (a failed
    // exchange stays on screen with its error).
    const stored = await load();
    if (stored) setConversation(stored);
    if (stored && finished) setAsked(null);
  }

  const exchanges = conversation ? exchangesOf(conversation) : [];
  return (
    <div className="area">
      <p>
        <Link to="/roundtable">← Agents and conversations</Link>
      </p>
      <h1>{conversation?.title ?? "Conversation"}</h1>
      <ErrorNote error={error} />
      {exchanges.map((exchange, i) => (
        <ExchangeView key={i} exchange={exchange} index={i} />
      ))}
      {asked !== null && <ExchangeView exchange={live} index={exchanges.length} live />}
      {stream.running && (
        <SteerPanel runId={runId} state={steerState(live, steered)} step="round" scope="conversations" onSent={setSteered} />
      )}
      <ErrorNote error={stream.error} />
      <FollowNote stream={stream} />
      {conversation && (
        <form className="card" onSubmit={ask} aria-label="Ask the table">
          <label htmlFor="follow-up">{exchanges.length ? "Follow-up question" : "Question for the table"}</label>
          <textarea id="follow-up" rows={3} value={question} onChange={(e) => setQuestion(e.target.value)} />
          <label htmlFor="ask-budget">Budget (USD)</label>
          <input id="ask-budget" inputMode="decimal" value={budget} onChange={(e) => setBudget(e.target.value)}
                 aria-describedby="ask-budget-help" />
          <p id="ask-budget-help" className="hint">Optional: before a round would pass it, the table goes to its synthesis.</p>
          <label className="check">
            <input type="checkbox" checked={wait} onChange={(e) => setWait(e.target.checked)} /> Wait for me after every round
          </label>
          <div className="actions">
            <button type="submit" disabled={stream.running || !question.trim() || !writes("conversations")}>
              {stream.running ? "The table is debating…" : "Ask the table"}
            </button>
          </div>
        </form>
      )}
    </div>
  );
}
