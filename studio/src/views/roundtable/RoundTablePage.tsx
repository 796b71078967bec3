/** Round table: the workspace's agents (persona, role, model, documents, memories) and its conversations. */
import { useCallback, useEffect, useState } from "react";
import { Link, useNavigate } from "react-router";

import { count, ErrorNote, formatDate } from "../../components/ui";
import { useSession } from "../../session/session";
import { AgentsPanel } from "./AgentsPanel";

interface ConversationRow {
  id: string;
  title: string;
  createdAt: string;
  _count?: { messages: number };
}

export default function RoundTablePage() {
  return (
    <div className="area">
      <h1>Round table</h1>
      <p className="lede">
        Up to five agents and a devil's advocate debate a question over rounds until they converge, then a synthesis.
      </p>
      <div className="two-columns">
        <AgentsPanel />
        <ConversationsPanel />
      </div>
    </div>
  );
}

function ConversationsPanel() {
  const { api, writes } = useSession();
  const navigate = useNavigate();
  const [rows, setRows] = useState<ConversationRow[] | null>(null);
  const [title, setTitle] = useState("");
  const [error, setError] = useState<unknown>(null);

  const load = useCallback(async () => {
    try {
      setRows((await api<{ conversations: ConversationRow[] }>("/v1/conversations")).conversations);
    } catch (err) {
      setError(err);
    }
  }, [api]);

  useEffect(() => {
    void load();
  }, [load]);

  async function create(event: React.FormEvent) {
    event.preventDefault();
    if (!title.trim()) return;
    try {
      const body = await api<{ conversation: ConversationRow }>("/v1/conversations", { method: "POST", body: { title: title.trim() } });
      navigate(`/roundtable/${encodeURIComponent(body.conversation.id)}`);
    } catch (err) {
      setError(err);
    }
  }

  return (
    <section className="card" aria-labelledby="conversations-title">
      <h2 id="conversations-title">Conversations</h2>
      <form onSubmit={create} className="inline-form">
        <label htmlFor="conversation-title">New conversation title</label>
        <input id="conversation-title" value={title} onChange={(e) => setTitle(e.target.value)} />
        <button type="submit" disabled={!title.trim() || !writes("conversations")}>
          Create conversation
        </button>
      </form>
      <ErrorNote error={error} />
      {rows === null ? (
        <p role="status">Loading…</p>
      ) : rows.length === 0 ? (
        <p className="muted">No conversation yet.</p>
      ) : (
        <ul className="rows">
          {rows.map((c) => (
            <li key={c.id}>
              <Link to={`/roundtable/${encodeURIComponent(c.id)}`}>{c.title}</Link>{" "}
              <span className="muted">
                {formatDate(c.createdAt)} · {count(c._count?.messages ?? 0, "message")}
              </span>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
