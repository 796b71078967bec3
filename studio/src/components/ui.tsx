/** Small shared pieces: error notes, status lines, badges, counted words, number formats, lists from text. */
import type { ReactNode } from "react";

import { describeError } from "../api/client";
import type { FollowState } from "../streams/useFollow";

export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p role="alert" className="error">
      {typeof error === "string" ? error : describeError(error)}
    </p>
  );
}

/** A status line a screen reader announces when it changes (not every token: just the phase). */
export function StatusLine({ children }: { children: ReactNode }) {
  return (
    <p className="status" role="status" aria-live="polite">
      {children}
    </p>
  );
}

/** Where a followed stream stands when it is not simply reading: reconnecting after a drop, or waiting out a
 * storage outage (the run goes on once storage is back, and the page reads on to its end). */
export function FollowNote({ stream }: { stream: FollowState }) {
  if (!stream.running) return null;
  if (stream.outage) {
    return (
      <p className="note" aria-live="polite" data-testid="follow-note">
        Storage is unavailable for now. The run goes on once it is back, and this page follows it to its end.
      </p>
    );
  }
  if (stream.reconnects === 0) return null;
  return (
    <p className="muted" aria-live="polite" data-testid="follow-note">
      Connection lost; resuming (attempt {stream.reconnects})…
    </p>
  );
}

/** "1 round", "3 rounds": a count and its noun, singular or plural (`plural` for the irregular ones). */
export function count(n: number, singular: string, plural = `${singular}s`): string {
  return `${n} ${n === 1 ? singular : plural}`;
}

export function Badge({ tone, children, label }: { tone: string; children: ReactNode; label?: string }) {
  return (
    <span className={`badge badge-${tone}`} aria-label={label}>
      {children}
    </span>
  );
}

export function formatCost(usd: number | null | undefined): string {
  if (usd === null || usd === undefined) return "—";
  if (usd === 0) return "$0";
  return usd < 0.01 ? `$${usd.toFixed(6)}` : `$${usd.toFixed(4)}`;
}

/** The parts of some tokens paid at other rates, as a note after their count: " (120 cached · 2,000 reasoning)", or
 * "" when there are none. */
export function paidParts(usage: { cachedTokens?: number; reasoningTokens?: number } | null | undefined): string {
  const parts = [];
  if (usage?.cachedTokens) parts.push(`${usage.cachedTokens.toLocaleString("en")} cached`);
  if (usage?.reasoningTokens) parts.push(`${usage.reasoningTokens.toLocaleString("en")} reasoning`);
  return parts.length ? ` (${parts.join(" · ")})` : "";
}

export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

export function formatDate(iso: string | null | undefined): string {
  if (!iso) return "—";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** "a, b ,c" → ["a", "b", "c"] (the forms take lists as comma-separated text). */
export function splitList(text: string): string[] {
  return text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

export function BulletList({ items, empty = "None." }: { items: readonly string[] | undefined; empty?: string }) {
  if (!items || items.length === 0) return <p className="muted">{empty}</p>;
  return (
    <ul>
      {items.map((item, i) => (
        <li key={i}>{item}</li>
      ))}
    </ul>
  );
}

/** A captioned table of plain cells, scrolling sideways on a narrow screen; `rowHeaders`: each row's first cell
 * names the row. */
export function DataTable({
  caption,
  columns,
  rows,
  rowHeaders = false,
}: {
  caption: ReactNode;
  columns: readonly string[];
  rows: readonly (readonly ReactNode[])[];
  rowHeaders?: boolean;
}) {
  return (
    <div className="table-wrap">
      <table>
        <caption>{caption}</caption>
        <thead>
          <tr>
            {columns.map((c) => (
              <th key={c} scope="col">
                {c}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((row, i) => (
            <tr key={i}>
              {row.map((value, j) =>
                rowHeaders && j === 0 ? (
                  <th key={j} scope="row">
                    {value}
                  </th>
                ) : (
                  <td key={j}>{value}</td>
                ),
              )}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
