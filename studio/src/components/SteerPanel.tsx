/**
 * Steer a running debate (docs/steering.md): a message every agent sees from the next turn on, and the run's
 * Pause / Continue / Guide / End, each one `POST /v1/runs/{id}/input`. Shared by the duel and round-table viewers.
 */
import { useState } from "react";

import { describeError } from "../api/client";
import { useSession } from "../session/session";

/** Where a steered run stands, as its events tell it. */
export type SteerState = "running" | "pausing" | "waiting" | "ending" | "ended";

interface Props {
  runId: string | null;
  state: SteerState;
  /** What one step is called in this mode: "turn" or "round". */
  step: string;
  /** The scope a key needs to steer this kind of run (the mode's own). */
  scope: string;
  /** Told of each input sent, for the viewer to show what is pending. */
  onSent?: (action: string | null) => void;
}

type Input = { content?: string; action?: string };

export function SteerPanel({ runId, state, step, scope, onSent }: Props) {
  const { api, writes } = useSession();
  const [message, setMessage] = useState("");
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const [sent, setSent] = useState<string | null>(null);
  if (!runId || state === "ended") return null;

  async function send(input: Input, done: string) {
    if (!runId) return;
    setBusy(true);
    setProblem(null);
    try {
      await api(`/v1/runs/${encodeURIComponent(runId)}/input`, { method: "POST", body: input });
      if (input.content) setMessage("");
      setSent(done);
      onSent?.(input.action ?? null);
    } catch (err) {
      setProblem(describeError(err));
    } finally {
      setBusy(false);
    }
  }

  const text = message.trim();
  const waiting = state === "waiting";
  const disabled = busy || !writes(scope);
  return (
    <section className="card steer" aria-label="Steer the debate">
      <h3>Steer the debate</h3>
      <p className="muted steer-note" aria-live="polite">
        {waiting
          ? `Waiting for you after this ${step}: continue, guide it with a message, or end it.`
          : state === "pausing"
            ? `Pausing after this ${step}…`
            : state === "ending"
              ? "Going to the verdict after this " + step + "…"
              : sent ?? `Your message reaches every agent from the next ${step} on.`}
      </p>
      <label htmlFor="steer-message">Message to the debate</label>
      <textarea id="steer-message" rows={2} value={message} onChange={(e) => setMessage(e.target.value)} />
      <div className="actions">
        {waiting ? (
          <>
            <button type="button" disabled={disabled || !text} onClick={() => send({ action: "guide", content: text }, "Guidance sent; the debate goes on.")}>
              Guide
            </button>
            <button type="button" disabled={disabled} onClick={() => send({ action: "continue" }, "The debate goes on.")}>
              Continue
            </button>
          </>
        ) : (
          <>
            <button type="button" disabled={disabled || !text} onClick={() => send({ content: text }, `Message sent: the next ${step} hears it.`)}>
              Send message
            </button>
            <button type="button" className="quiet" disabled={disabled || state !== "running"} onClick={() => send({ action: "pause" }, `Pausing after this ${step}…`)}>
              Pause
            </button>
          </>
        )}
        <button type="button" className="quiet" disabled={disabled || state === "ending"} onClick={() => send({ action: "end" }, "Going to the verdict…")}>
          End
        </button>
      </div>
      {problem && (
        <p role="alert" className="error">
          {problem}
        </p>
      )}
    </section>
  );
}

/** A budget field's value as the request body's `maxCost` (nothing when empty). */
export function budgetBody(usd: string): { maxCost?: number } {
  const value = Number(usd);
  return usd.trim() && Number.isFinite(value) && value > 0 ? { maxCost: value } : {};
}

/** Why a debate ended before its last step, in words. */
export function stoppedText(stoppedBy: string | null | undefined): string | null {
  switch (stoppedBy) {
    case "budget":
      return "Ended early: its budget held no more.";
    case "user":
      return "Ended early by you.";
    case "unanimous":
      return "Ended early: the table agreed from the start.";
    default:
      return stoppedBy ? `Ended early (${stoppedBy}).` : null;
  }
}
