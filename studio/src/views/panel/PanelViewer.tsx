/** A panel run side by side: each panelist's answer as it arrives, adaptive depth's path, the arbitrator's answer
 * streaming (or a degraded answer's notice), how it was decided, the map of where the answers agree, `_meta`. */
import { ToolCalls as ToolRuns } from "../../components/ToolCalls";
import { Badge, count, formatCost, formatMs, paidParts, StatusLine } from "../../components/ui";
import { answerText, type PanelView, type Call, type Seat } from "../../streams/panel";
import { AgreementMap } from "./AgreementMap";
import { DecisionCard } from "./DecisionCard";
import { AdaptivePath, DegradedNotice } from "./Outcome";

function statusText(view: PanelView): string {
  const answered = view.seats.filter((s) => s.status === "answered" || s.status === "failed").length;
  const asked = view.seats.filter((s) => s.status !== "skipped").length; // adaptive depth may stop early
  switch (view.status) {
    case "waiting":
      return "Choosing the panel…";
    case "panel":
      return `${answered} of ${count(asked, "panelist")} ${answered === 1 ? "has" : "have"} answered`;
    case "deciding": {
      if (view.verdicts.length > 0) return `The judge has read the answers in ${view.verdicts.length} of its 2 orders`;
      const reviewers = view.seats.filter((s) => s.status === "answered").length;
      return `${view.reviews.length} of ${count(reviewers, "reviewer")} ${view.reviews.length === 1 ? "has" : "have"} ranked the others' answers`;
    }
    case "answering":
      return view.answering ? `${view.answering.model} is writing the answer (${view.answering.role})` : "Answering…";
    case "done":
      return "Done.";
    case "cancelled":
      return "Cancelled.";
    default:
      return `Failed: ${view.error}`;
  }
}

/** `familyNotes`: show the note on an arbitrator or judge of a panelist's family (only where another family could be
 * chosen: `familiesToChoose`). */
export function PanelViewer({ view, familyNotes }: { view: PanelView; familyNotes: boolean }) {
  const text = answerText(view);
  const degraded = view.outcome?.outcome === "degraded";
  const labelled = degraded || view.decision?.decidedBy === "none"; // no one decided: the answers, labelled
  return (
    <section aria-label="Panel run" className="panel-run">
      <StatusLine>{statusText(view)}</StatusLine>
      <ol className="seats" aria-label="Panelists">
        {view.seats.map((seat) => (
          <SeatColumn key={seat.index} seat={seat} />
        ))}
      </ol>
      {view.adaptive && <AdaptivePath adaptive={view.adaptive} seats={view.seats} />}
      {degraded && view.outcome && <DegradedNotice status={view.outcome} />}
      {/* An answer that only calls tools has no text: its calls stand for it. */}
      {(text || (view.answering && view.calls.length === 0) || view.fallbacks.length > 0) && (
        <section className="card" aria-labelledby="panel-answer-title">
          <h3 id="panel-answer-title">
            {labelled ? "Answers, labelled" : `Answer${view.answering ? ` (${view.answering.role}: ${view.answering.model})` : ""}`}
          </h3>
          {/* A degraded answer's notice lists every failure; "the next candidate answers" would be untrue of the last. */}
          {!degraded && view.fallbacks.map((f, i) => (
            <p key={i} className="error">
              {f.role} {f.model} failed: {f.error}
              {f.detail ? ` (${f.detail})` : ""}; the next candidate answers.
            </p>
          ))}
          <p className="answer-text" aria-busy={view.status === "answering"}>
            {text}
          </p>
        </section>
      )}
      {view.calls.length > 0 && <ToolCalls calls={view.calls} />}
      {(view.decision || view.reviews.length > 0 || view.verdicts.length > 0) && (
        <DecisionCard decision={view.decision} reviews={view.reviews} verdicts={view.verdicts} familyNote={familyNotes} />
      )}
      {view.analysis && <AgreementMap analysis={view.analysis} />}
      {view.error && view.status === "failed" && (
        <p role="alert" className="error">
          {view.error}
        </p>
      )}
      {view.completion?._meta && <MetaTable meta={view.completion._meta} />}
    </section>
  );
}

function SeatColumn({ seat }: { seat: Seat }) {
  const tone = { failed: "bad", answered: "good", skipped: "neutral", waiting: "live" }[seat.status];
  const badge = { failed: "failed", answered: "answered", skipped: "not asked", waiting: "thinking…" }[seat.status];
  return (
    <li className={`seat seat-${seat.status}`} data-status={seat.status}>
      <h3 className="seat-model">{seat.model}</h3>
      <Badge tone={tone}>{badge}</Badge>
      <dl className="figures">
        <dt>Tokens</dt>
        <dd className="seat-tokens">
          {seat.tokens ?? "—"}
          {paidParts(seat)}
        </dd>
        <dt>Cost</dt>
        <dd>{formatCost(seat.cost)}</dd>
        <dt>Latency</dt>
        <dd>{formatMs(seat.latencyMs)}</dd>
      </dl>
      <ToolRuns calls={seat.tools} />
      {seat.status === "failed" ? (
        <p className="error">
          {seat.error ?? "No answer"}
          {seat.detail ? `: ${seat.detail}` : ""}
        </p>
      ) : seat.status === "skipped" ? (
        <p className="muted">Not asked: the first seats agreed (adaptive depth).</p>
      ) : (
        <p className="seat-answer">{seat.answer ?? ""}</p>
      )}
    </li>
  );
}

/** The functions the answer calls (chat completions with `tools`): each call's name and arguments. */
function ToolCalls({ calls }: { calls: Call[] }) {
  return (
    <section className="card" aria-labelledby="tool-calls-title">
      <h3 id="tool-calls-title">Tool calls</h3>
      <ol className="rows">
        {calls.map((call) => (
          <li key={call.index} aria-label={`Call of ${call.name}`}>
            <code>{call.name}</code> <span className="muted">{call.id}</span>
            <pre aria-label={`Arguments of ${call.name}`}>{call.arguments}</pre>
          </li>
        ))}
      </ol>
    </section>
  );
}

function cell(value: unknown): string {
  if (value === null || value === undefined) return "—";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(6);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

interface MetaPanelist {
  model: string;
  tokens?: number;
  cachedTokens?: number;
  reasoningTokens?: number;
  cost?: number;
  latencyMs?: number;
  success?: boolean;
  proposal?: string; // a debate offered tools: what the panelist proposed
}

/** `_meta`'s figures: scalars as rows, and the panelists of `_meta.debate` / `_meta.panel` as a table. */
function MetaTable({ meta }: { meta: Record<string, unknown> }) {
  const scalars = Object.entries(meta).filter(([, v]) => v === null || typeof v !== "object");
  const detail = (meta.debate ?? meta.panel) as Record<string, unknown> | undefined;
  // A debate lists its seats as `panelists`, a raw panel as `models`.
  const panelists = (detail?.panelists ?? detail?.models ?? []) as MetaPanelist[];
  const proposals = panelists.some((p) => p.proposal !== undefined);
  return (
    <section className="card" aria-labelledby="meta-title">
      <h3 id="meta-title">
        Figures (<code>_meta</code>)
      </h3>
      <div className="table-wrap">
        <table>
          <tbody>
            {scalars.map(([k, v]) => (
              <tr key={k}>
                <th scope="row">{k}</th>
                <td>{cell(v)}</td>
              </tr>
            ))}
            {detail &&
              Object.entries(detail)
                // scalars only, each once: the debate's cached and reasoning totals repeat `_meta`'s
                .filter(([k, v]) => (v === null || typeof v !== "object") && !(k in meta))
                .map(([k, v]) => (
                  <tr key={`d-${k}`}>
                    <th scope="row">{k}</th>
                    <td>{cell(v)}</td>
                  </tr>
                ))}
          </tbody>
        </table>
      </div>
      {panelists.length > 0 && (
        <div className="table-wrap">
          <table>
            <caption>Panelists</caption>
            <thead>
              <tr>
                <th scope="col">Model</th>
                <th scope="col">Result</th>
                <th scope="col">Tokens</th>
                <th scope="col">Cached</th>
                <th scope="col">Reasoning</th>
                <th scope="col">Cost</th>
                <th scope="col">Latency</th>
                {proposals && <th scope="col">Proposal</th>}
              </tr>
            </thead>
            <tbody>
              {panelists.map((p, i) => (
                <tr key={i}>
                  <td>{p.model}</td>
                  <td>{p.success === false ? "failed" : "answered"}</td>
                  <td>{cell(p.tokens)}</td>
                  <td>{cell(p.cachedTokens ?? 0)}</td>
                  <td>{cell(p.reasoningTokens ?? 0)}</td>
                  <td>{formatCost(p.cost)}</td>
                  <td>{formatMs(p.latencyMs)}</td>
                  {proposals && <td className="seat-answer">{p.proposal ?? "—"}</td>}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
