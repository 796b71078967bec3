/** The workspace's agents: create and edit them, give them documents, see and forget their memories. */
import { useCallback, useEffect, useState } from "react";

import { ErrorNote, formatDate } from "../../components/ui";
import { useSession } from "../../session/session";

interface Agent {
  id: string;
  name: string;
  role: string;
  persona: string;
  model: string | null;
  isDevilsAdvocate: boolean;
}

interface AgentDraft {
  name: string;
  role: string;
  persona: string;
  model: string;
}

const BLANK: AgentDraft = { name: "", role: "", persona: "", model: "" };

function draftOf(agent: Agent): AgentDraft {
  return { name: agent.name, role: agent.role, persona: agent.persona, model: agent.model ?? "" };
}

export function AgentsPanel() {
  const { api, writes } = useSession();
  const [agents, setAgents] = useState<Agent[] | null>(null);
  const [draft, setDraft] = useState<AgentDraft>(BLANK);
  const [error, setError] = useState<unknown>(null);
  const canWrite = writes("conversations");

  const load = useCallback(async () => {
    try {
      setAgents((await api<{ agents: Agent[] }>("/v1/agents")).agents);
    } catch (err) {
      setError(err);
    }
  }, [api]);

  useEffect(() => {
    void load();
  }, [load]);

  async function create(event: React.FormEvent) {
    event.preventDefault();
    setError(null);
    try {
      await api("/v1/agents", {
        method: "POST",
        body: { name: draft.name.trim(), role: draft.role.trim(), persona: draft.persona.trim(), model: draft.model.trim() || null },
      });
      setDraft(BLANK);
      await load();
    } catch (err) {
      setError(err);
    }
  }

  return (
    <section className="card" aria-labelledby="agents-title">
      <h2 id="agents-title">Agents</h2>
      <p className="muted">The first five regular agents sit at the table, with the devil's advocate.</p>
      {agents === null ? (
        <p role="status">Loading…</p>
      ) : agents.length === 0 ? (
        <p className="muted">No agent yet: create one below.</p>
      ) : (
        <ul className="rows agents">
          {agents.map((agent) => (
            <AgentRow key={agent.id} agent={agent} onChanged={load} canWrite={canWrite} />
          ))}
        </ul>
      )}
      <form onSubmit={create} aria-label="New agent" className="form-grid">
        <h3 className="span-all">New agent</h3>
        <AgentFields draft={draft} setDraft={setDraft} idPrefix="new-agent" />
        <span />
        <div className="actions">
          <button type="submit" disabled={!draft.name.trim() || !canWrite}>
            Create agent
          </button>
        </div>
      </form>
      <ErrorNote error={error} />
    </section>
  );
}

function AgentFields({ draft, setDraft, idPrefix }: { draft: AgentDraft; setDraft: (d: AgentDraft) => void; idPrefix: string }) {
  const set = (name: keyof AgentDraft) => (e: React.ChangeEvent<HTMLInputElement | HTMLTextAreaElement>) =>
    setDraft({ ...draft, [name]: e.target.value });
  return (
    <>
      <label htmlFor={`${idPrefix}-name`}>Name</label>
      <input id={`${idPrefix}-name`} value={draft.name} onChange={set("name")} />
      <label htmlFor={`${idPrefix}-role`}>Role</label>
      <input id={`${idPrefix}-role`} value={draft.role} onChange={set("role")} />
      <label htmlFor={`${idPrefix}-persona`}>Persona</label>
      <textarea id={`${idPrefix}-persona`} rows={3} value={draft.persona} onChange={set("persona")} />
      <label htmlFor={`${idPrefix}-model`}>Model</label>
      <input id={`${idPrefix}-model`} placeholder="default" value={draft.model} onChange={set("model")} />
    </>
  );
}

function AgentRow({ agent, onChanged, canWrite }: { agent: Agent; onChanged: () => Promise<void>; canWrite: boolean }) {
  const { api } = useSession();
  const [open, setOpen] = useState<"edit" | "documents" | "memories" | null>(null);
  const [draft, setDraft] = useState<AgentDraft>(() => draftOf(agent));
  const [error, setError] = useState<unknown>(null);
  const base = `/v1/agents/${encodeURIComponent(agent.id)}`;
  const prefix = `agent-${agent.id}`;

  async function save(event: React.FormEvent) {
    event.preventDefault();
    setError(null);
    try {
      await api(base, {
        method: "PATCH",
        body: { name: draft.name.trim(), role: draft.role.trim(), persona: draft.persona.trim(), model: draft.model.trim() || null },
      });
      setOpen(null);
      await onChanged();
    } catch (err) {
      setError(err);
    }
  }

  async function remove() {
    if (!window.confirm(`Delete ${agent.name}, with its documents and memories?`)) return;
    try {
      await api(base, { method: "DELETE" });
      await onChanged();
    } catch (err) {
      setError(err);
    }
  }

  const toggle = (what: "edit" | "documents" | "memories") => setOpen(open === what ? null : what);
  return (
    <li className="agent">
      <p>
        <strong>{agent.name}</strong> <span className="muted">{agent.role}</span>
        {agent.isDevilsAdvocate && <span className="badge badge-warn">devil's advocate</span>}{" "}
        <span className="muted">{agent.model ?? "default model"}</span>
      </p>
      {agent.persona && <p className="persona-text">{agent.persona}</p>}
      <div className="actions" role="group" aria-label={`${agent.name}: actions`}>
        <button type="button" className="quiet" aria-expanded={open === "edit"} onClick={() => toggle("edit")} disabled={!canWrite}>
          Edit
        </button>
        <button type="button" className="quiet" aria-expanded={open === "documents"} onClick={() => toggle("documents")}>
          Documents
        </button>
        <button type="button" className="quiet" aria-expanded={open === "memories"} onClick={() => toggle("memories")}>
          Memories
        </button>
        <button type="button" className="quiet danger" onClick={remove} disabled={!canWrite}>
          Delete
        </button>
      </div>
      {open === "edit" && (
        <form onSubmit={save} className="form-grid" aria-label={`Edit ${agent.name}`}>
          <AgentFields draft={draft} setDraft={setDraft} idPrefix={prefix} />
          <span />
          <div className="actions">
            <button type="submit" disabled={!draft.name.trim()}>
              Save
            </button>
          </div>
        </form>
      )}
      {open === "documents" && <Documents base={base} prefix={prefix} canWrite={canWrite} />}
      {open === "memories" && <Memories base={base} canWrite={canWrite} />}
      <ErrorNote error={error} />
    </li>
  );
}

interface DocumentRow {
  id: string;
  title: string;
  chars: number;
}

function Documents({ base, prefix, canWrite }: { base: string; prefix: string; canWrite: boolean }) {
  const { api } = useSession();
  const [docs, setDocs] = useState<DocumentRow[] | null>(null);
  const [title, setTitle] = useState("");
  const [text, setText] = useState("");
  const [error, setError] = useState<unknown>(null);

  const load = useCallback(async () => {
    try {
      setDocs((await api<{ documents: DocumentRow[] }>(`${base}/documents`)).documents);
    } catch (err) {
      setError(err);
    }
  }, [api, base]);

  useEffect(() => {
    void load();
  }, [load]);

  async function add(event: React.FormEvent) {
    event.preventDefault();
    setError(null);
    try {
      await api(`${base}/documents`, { method: "POST", body: { title: title.trim(), text } });
      setTitle("");
      setText("");
      await load();
    } catch (err) {
      setError(err);
    }
  }

  async function remove(doc: DocumentRow) {
    try {
      await api(`${base}/documents/${encodeURIComponent(doc.id)}`, { method: "DELETE" });
      await load();
    } catch (err) {
      setError(err);
    }
  }

  return (
    <div className="sub">
      <h4>Documents</h4>
      {docs?.length === 0 && <p className="muted">No documents.</p>}
      <ul className="rows">
        {docs?.map((d) => (
          <li key={d.id}>
            {d.title} <span className="muted">{d.chars.toLocaleString()} characters</span>{" "}
            <button type="button" className="quiet danger" onClick={() => remove(d)} disabled={!canWrite}>
              Remove
            </button>
          </li>
        ))}
      </ul>
      <form onSubmit={add} className="form-grid" aria-label="Add a document">
        <label htmlFor={`${prefix}-doc-title`}>Title</label>
        <input id={`${prefix}-doc-title`} value={title} onChange={(e) => setTitle(e.target.value)} />
        <label htmlFor={`${prefix}-doc-text`}>Text</label>
        <textarea id={`${prefix}-doc-text`} rows={4} value={text} onChange={(e) => setText(e.target.value)} />
        <span />
        <div className="actions">
          <button type="submit" disabled={!title.trim() || !text || !canWrite}>
            Add document
          </button>
        </div>
      </form>
      <ErrorNote error={error} />
    </div>
  );
}

interface Memory {
  id: string;
  content: string;
  createdAt: string;
}

function Memories({ base, canWrite }: { base: string; canWrite: boolean }) {
  const { api } = useSession();
  const [memories, setMemories] = useState<Memory[] | null>(null);
  const [error, setError] = useState<unknown>(null);

  const load = useCallback(async () => {
    try {
      setMemories((await api<{ memories: Memory[] }>(`${base}/memories`)).memories);
    } catch (err) {
      setError(err);
    }
  }, [api, base]);

  useEffect(() => {
    void load();
  }, [load]);

  async function forget(memory?: Memory) {
    try {
      await api(memory ? `${base}/memories/${encodeURIComponent(memory.id)}` : `${base}/memories`, { method: "DELETE" });
      await load();
    } catch (err) {
      setError(err);
    }
  }

  return (
    <div className="sub">
      <h4>Memories</h4>
      {memories?.length === 0 && <p className="muted">Nothing remembered yet.</p>}
      <ul className="rows">
        {memories?.map((m) => (
          <li key={m.id}>
            {m.content} <span className="muted">{formatDate(m.createdAt)}</span>{" "}
            <button type="button" className="quiet danger" onClick={() => forget(m)} disabled={!canWrite}>
              Forget
            </button>
          </li>
        ))}
      </ul>
      {memories && memories.length > 1 && (
        <button type="button" className="quiet danger" onClick={() => forget()} disabled={!canWrite}>
          Forget everything
        </button>
      )}
      <ErrorNote error={error} />
    </div>
  );
}
