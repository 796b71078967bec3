/** Small shared pieces: error notes, status lines, badges, number formats, lists from text. */
import type { ReactNode } from "react";

import { describeError } from "../api/client";

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
