/** History: the workspace's runs of every mode, newest first; open one to replay it from its stored events. */
import { useCallback, useEffect, useState } from "react";
import { Link } from "react-router";

import { Badge, ErrorNote, formatCost, formatDate, paidParts } from "../../components/ui";
import { useSession } from "../../session/session";
import { KIND_LABELS, type RunKind, type RunSummary } from "./runs";

const STATUS_TONES: Record<string, string> = { completed: "good", failed: "bad", cancelled: "warn", running: "live", queued: "neutral" };

export function HistoryPage() {
  const { api } = useSession();
  const [kind, setKind] = useState<RunKind | "">("");
  const [status, setStatus] = useState("");
  const [runs, setRuns] = useState<RunSummary[] | null>(null);
  const [cursor, setCursor] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);

  const load = useCallback(
    async (after: string | null) => {
      const query = new URLSearchParams({ limit: "25" });
      if (kind) query.set("kind", kind);
      if (status) query.set("status", status);
      if (after) query.set("cursor", after);
      try {
        const page = await api<{ data: RunSummary[]; nextCursor: string | null }>(`/v1/runs?${query}`);
        setRuns((current) => (after && current ? [...current, ...page.data] : page.data));
        setCursor(page.nextCursor);
        setError(null);
      } catch (err) {
        setError(err);
        setRuns([]);
      }
    },
    [api, kind, status],
  );

  useEffect(() => {
    setRuns(null);
    void load(null);
  }, [load]);

  return (
    <div className="area">
      <h1>History</h1>
      <p className="lede">Your duels, panels, round-table questions and workflow runs. Open one to replay it as it happened.</p>
      <form className="inline-form" aria-label="Filter runs" onSubmit={(e) => e.preventDefault()}>
        <label htmlFor="history-kind">Kind</label>
        <select id="history-kind" value={kind} onChange={(e) => setKind(e.target.value as RunKind | "")}>
          <option value="">all</option>
          {Object.entries(KIND_LABELS).map(([value, label]) => (
            <option key={value} value={value}>
              {label}
            </option>
          ))}
        </select>
        <label htmlFor="history-status">Status</label>
        <select id="history-status" value={status} onChange={(e) => setStatus(e.target.value)}>
          <option value="">all</option>
          {["queued", "running", "completed", "failed", "cancelled"].map((s) => (
            <option key={s}>{s}</option>
          ))}
        </select>
      </form>
      <ErrorNote error={error} />
      {runs === null ? (
        <p role="status">Loading…</p>
      ) : runs.length === 0 ? (
        <p className="muted">No runs yet.</p>
      ) : (
        <div className="table-wrap">
          <table className="runs">
            <caption className="sr-only">Runs, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Kind</th>
                <th scope="col">Status</th>
                <th scope="col">Started</th>
                <th scope="col">Tokens</th>
                <th scope="col">Cost</th>
              </tr>
            </thead>
            <tbody>
              {runs.map((run) => (
                <tr key={run.id} data-kind={run.kind}>
                  <td>
                    <Link to={`/history/${encodeURIComponent(run.id)}`}>{run.title || run.id}</Link>
                  </td>
                  <td>{KIND_LABELS[run.kind] ?? run.kind}</td>
                  <td>
                    <Badge tone={STATUS_TONES[run.status] ?? "neutral"}>{run.status}</Badge>
                  </td>
                  <td>{formatDate(run.startedAt ?? run.createdAt)}</td>
                  <td>
                    {run.usage?.totalTokens ?? "—"}
                    {paidParts(run.usage)}
                  </td>
                  <td>{formatCost(run.usage?.costUsd)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor && (
        <button type="button" onClick={() => load(cursor)}>
          Load more
        </button>
      )}
    </div>
  );
}
