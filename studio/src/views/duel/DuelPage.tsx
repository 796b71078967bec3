/** Duel: a form to start a debate against a chosen opponent, and the live viewer; or one stored debate. */
import { useEffect, useState } from "react";
import { Link, useParams } from "react-router";

import { describeError, type Api } from "../../api/client";
import { DUEL_ROUNDS } from "../../api/limits";
import { TERMINAL_EVENTS } from "../../api/sse";
import { budgetBody, SteerPanel, type SteerState } from "../../components/SteerPanel";
import { ErrorNote, FollowNote, splitList } from "../../components/ui";
import { useSession } from "../../session/session";
import { duelReducer, emptyDuel, type DuelView } from "../../streams/duel";
import { useFollow } from "../../streams/useFollow";
import { useStreamReducer } from "../../streams/useStream";
import { DuelViewer, type Verdict } from "./DuelViewer";

interface DuelForm {
  topic: string;
  name: string;
  bio: string;
  traits: string;
  interests: string;
  rounds: number;
  budget: string;
  wait: boolean;
}

const BLANK: DuelForm = { topic: "", name: "", bio: "", traits: "", interests: "", rounds: DUEL_ROUNDS.default, budget: "", wait: false };

/** Where the viewer's run stands for steering: from its events, and the pause or end just asked for. */
function steerState(view: DuelView, asked: string | null): SteerState {
  if (["judging", "done", "failed", "cancelled"].includes(view.status)) return "ended";
  if (view.status === "waiting") return "waiting";
  if (asked === "end") return "ending";
  return asked === "pause" ? "pausing" : "running";
}

interface StoredDebate {
  id: string;
  rounds: number | null;
  verdicts: Verdict[];
}

/** Once a debate is done, fetch its two judgements (they are stored, not streamed). */
function useVerdicts(api: Api, view: DuelView): Verdict[] | null {
  const [verdicts, setVerdicts] = useState<Verdict[] | null>(null);
  useEffect(() => {
    setVerdicts(null);
    if (view.status !== "done" || !view.id) return;
    let live = true;
    api<StoredDebate>(`/api/debate/${encodeURIComponent(view.id)}`).then(
      (d) => live && setVerdicts(d.verdicts),
      () => live && setVerdicts([]),
    );
    return () => {
      live = false;
    };
  }, [api, view.status, view.id]);
  return verdicts;
}

export function DuelPage() {
  const { key, api, writes } = useSession();
  const [form, setForm] = useState<DuelForm>(BLANK);
  const [rounds, setRounds] = useState<number | null>(null);
  const [debateId, setDebateId] = useState<string | null>(null);
  const [view, push, reset] = useStreamReducer(duelReducer, emptyDuel);
  const stream = useFollow();
  const verdicts = useVerdicts(api, view);
  const [problem, setProblem] = useState<string | null>(null);

  const [asked, setAsked] = useState<string | null>(null);
  useEffect(() => {
    if (view.status === "waiting" || view.status === "judging") setAsked(null);  // the pause (or end) took effect
  }, [view.status]);

  function field<K extends keyof DuelForm>(name: K) {
    return (e: React.ChangeEvent<HTMLInputElement | HTMLTextAreaElement>) =>
      setForm((f) => ({
        ...f,
        [name]: name === "rounds" ? Number(e.target.value) : name === "wait" ? (e.target as HTMLInputElement).checked : e.target.value,
      }));
  }

  function submit(event: React.FormEvent) {
    event.preventDefault();
    if (!form.topic.trim() || !form.name.trim()) {
      setProblem("A topic and your persona's name are both needed.");
      return;
    }
    if (!Number.isInteger(form.rounds) || form.rounds < DUEL_ROUNDS.min || form.rounds > DUEL_ROUNDS.max) {
      setProblem(`Rounds must be a whole number from ${DUEL_ROUNDS.min} to ${DUEL_ROUNDS.max}.`);
      return;
    }
    if (form.budget.trim() && !budgetBody(form.budget).maxCost) {
      setProblem("The budget must be a positive amount of USD, or empty.");
      return;
    }
    setProblem(null);
    setAsked(null);
    reset();
    setRounds(form.rounds);
    setDebateId(null);
    let id: string | null = null;
    const userProfile = {
      name: form.name.trim(),
      ...(form.bio.trim() ? { bio: form.bio.trim() } : {}),
      softMemory: { traits: splitList(form.traits), interests: splitList(form.interests) },
    };
    void stream.start(key, {
      start: {
        url: "/api/debate",
        method: "POST",
        body: {
          topic: form.topic.trim(), rounds: form.rounds, userProfile,
          ...budgetBody(form.budget), ...(form.wait ? { await: "after_turn" } : {}),
        },
      },
      // A dropped connection resumes on the debate's event log, after the last event shown.
      resume: () => (id ? { url: `/api/debate/${encodeURIComponent(id)}/events` } : null),
      terminal: TERMINAL_EVENTS,
      onOpen(response) {
        id = id ?? response.headers.get("X-Debate-Id");
        setDebateId(id);
      },
      onEvent: push,
    });
  }

  async function cancel() {
    if (!debateId) return;
    try {
      await api(`/v1/runs/${encodeURIComponent(debateId)}/cancel`, { method: "POST" });
    } catch (err) {
      setProblem(`Could not cancel: ${describeError(err)}`);
    }
  }

  const canStart = writes("debate") && !stream.running;
  return (
    <div className="area">
      <h1>Duel</h1>
      <p className="lede">Your persona debates an opponent chosen for the topic; both stream as they speak, then two judges rule.</p>
      {!writes("debate") && <p className="error">This key cannot start duels: it needs the <code>debate</code> scope and must not be read-only.</p>}
      <form className="card form-grid" onSubmit={submit} aria-label="Start a duel">
        <label htmlFor="duel-topic-input">Topic</label>
        <textarea id="duel-topic-input" rows={2} required value={form.topic} onChange={field("topic")} />
        <label htmlFor="duel-name">Persona name</label>
        <input id="duel-name" required value={form.name} onChange={field("name")} />
        <label htmlFor="duel-bio">Bio</label>
        <textarea id="duel-bio" rows={2} value={form.bio} onChange={field("bio")} />
        <label htmlFor="duel-traits">Traits</label>
        <input id="duel-traits" value={form.traits} onChange={field("traits")} aria-describedby="duel-list-help" />
        <label htmlFor="duel-interests">Interests</label>
        <input id="duel-interests" value={form.interests} onChange={field("interests")} aria-describedby="duel-list-help" />
        <span />
        <p id="duel-list-help" className="hint">Traits and interests: separate them with commas.</p>
        <label htmlFor="duel-rounds">Rounds</label>
        <input id="duel-rounds" type="number" min={DUEL_ROUNDS.min} max={DUEL_ROUNDS.max} value={form.rounds}
               onChange={field("rounds")} />
        <label htmlFor="duel-budget">Budget (USD)</label>
        <input id="duel-budget" inputMode="decimal" value={form.budget} onChange={field("budget")} aria-describedby="duel-budget-help" />
        <span />
        <p id="duel-budget-help" className="hint">Optional: before a turn would pass it, the duel goes to its verdict.</p>
        <span />
        <label className="check">
          <input type="checkbox" checked={form.wait} onChange={field("wait")} /> Wait for me after every turn
        </label>
        <span />
        <div className="actions">
          <button type="submit" disabled={!canStart}>
            {stream.running ? "Debating…" : "Start the duel"}
          </button>
          {stream.running && debateId && (
            <button type="button" className="quiet" onClick={cancel}>
              Cancel the debate
            </button>
          )}
        </div>
      </form>
      <ErrorNote error={problem} />
      <ErrorNote error={stream.error} />
      <FollowNote stream={stream} />
      {debateId && (
        <p className="muted">
          Debate <Link to={`/duel/${encodeURIComponent(debateId)}`}>{debateId}</Link>
        </p>
      )}
      {stream.running && (
        <SteerPanel runId={debateId} state={steerState(view, asked)} step="turn" scope="debate" onSent={setAsked} />
      )}
      {(stream.running || view.turns.length > 0 || view.status !== "connecting") && (
        <DuelViewer view={view} rounds={rounds} verdicts={verdicts} />
      )}
    </div>
  );
}

/** One stored debate, replayed from its events and followed live if it is still running. */
export function DuelRecordPage() {
  const { id = "" } = useParams();
  const { key, api } = useSession();
  const [record, setRecord] = useState<StoredDebate | null>(null);
  const [view, push, reset] = useStreamReducer(duelReducer, emptyDuel);
  const stream = useFollow();
  const verdicts = useVerdicts(api, view);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    reset();
    setError(null);
    let live = true;
    api<StoredDebate>(`/api/debate/${encodeURIComponent(id)}`).then((debate) => {
      if (!live) return;
      setRecord(debate);
      const url = `/api/debate/${encodeURIComponent(id)}/events`;
      void stream.start(key, { start: { url }, resume: () => ({ url }), terminal: TERMINAL_EVENTS, onEvent: push });
    }, (err) => live && setError(err));
    return () => {
      live = false;
      stream.stop();
    };
  }, [id, key, api, push, reset, stream.start, stream.stop]);

  return (
    <div className="area">
      <p>
        <Link to="/duel">← New duel</Link>
      </p>
      <h1>Duel {id}</h1>
      <ErrorNote error={error ?? stream.error} />
      <FollowNote stream={stream} />
      {record && stream.running && <SteerPanel runId={id} state={steerState(view, null)} step="turn" scope="debate" />}
      {record && <DuelViewer view={view} rounds={record.rounds ?? DUEL_ROUNDS.default} verdicts={verdicts} />}
    </div>
  );
}
