/**
 * How much of the panel a question took and what became of it: adaptive depth's path (`_meta.adaptive`, docs/panel.md
 * "Adaptive depth") and the notice of a degraded answer, the labelled answers returned because every arbitrator
 * failed (`_meta.status`, "When every arbitrator fails").
 */
import type { Adaptive, RunStatus, Seat } from "../../streams/panel";
import { percent } from "./AgreementMap";

const WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight"];
const inWords = (n: number) => WORDS[n] ?? String(n);

/** The adaptive path in one line, e.g. "Adaptive: the first two seats agreed (92% ≥ 60%), 2 of 3 asked." */
export function adaptiveLine(adaptive: Adaptive, seats: Seat[]): string {
  const first = `the first ${inWords(adaptive.firstSeats.length)} seats`;
  const above = adaptive.agreement >= adaptive.threshold;
  const figures = `${percent(adaptive.agreement)} ${above ? "≥" : "<"} ${percent(adaptive.threshold)}`;
  if (adaptive.path === "agreed") {
    if (!adaptive.shadowAsked) {
      return `Adaptive: ${first} agreed (${figures}), ${adaptive.firstSeats.length} of ${adaptive.seats} asked.`;
    }
    return `Adaptive: ${first} agreed (${figures}); the shadow asks all ${adaptive.seats} anyway, to compare.`;
  }
  const silent = seats.filter((s) => s.status === "failed" && adaptive.firstSeats.includes(s.model)).map((s) => s.model);
  const why = silent.length > 0 ? `${silent.join(" and ")} did not answer` : `${first} disagreed (${figures})`;
  return `Adaptive: escalated, ${why}; all ${adaptive.seats} asked.`;
}

/** Whether stopping after the first seats would have answered the same, once the whole panel (the shadow) has. */
export function shadowLine(adaptive: Adaptive): string | null {
  const shadow = adaptive.shadow;
  if (!shadow) return null;
  return shadow.sameAnswer
    ? `Shadow: stopping after ${adaptive.firstSeats.join(" and ")} would have given the same answer ` +
        `(${percent(shadow.agreement)} alike).`
    : `Shadow: stopping after ${adaptive.firstSeats.join(" and ")} would have changed the answer ` +
        `(${percent(shadow.agreement)} alike, under ${percent(adaptive.threshold)}).`;
}

export function AdaptivePath({ adaptive, seats }: { adaptive: Adaptive; seats: Seat[] }) {
  const shadow = shadowLine(adaptive);
  return (
    <div className={`depth-path depth-${adaptive.path}`}>
      <p data-testid="adaptive-path">
        {adaptiveLine(adaptive, seats)} <span className="muted">First seats: {adaptive.firstSeats.join(", ")}.</span>
      </p>
      {shadow && <p data-testid="adaptive-shadow">{shadow}</p>}
    </div>
  );
}

/** The answer is the panelists' answers, labelled, because no arbitrator (or judge) could decide; who failed. */
export function DegradedNotice({ status }: { status: RunStatus }) {
  const role = status.reason?.replace(/_failed$/, "") ?? "arbitrator";
  return (
    <div className="note degraded" role="note" aria-labelledby="degraded-title">
      <h3 id="degraded-title">The judge failed: these are the panelists' answers, labelled</h3>
      <p>
        Every {role} candidate failed, so no one wrote or chose one answer: each panelist's answer is shown under its
        model's name, with the map of where they agree.
      </p>
      {status.failed.length > 0 && (
        <ul aria-label="Models that failed">
          {status.failed.map((f, i) => (
            <li key={i}>
              <strong>{f.model}</strong> ({f.role}): {f.error}
              {f.detail ? <span className="muted"> — {f.detail}</span> : null}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
