/** One question put to the table: the transcript grouped by round, stances, convergence and the synthesis. */
import { memo } from "react";

import { Badge, BulletList, count, StatusLine } from "../../components/ui";
import { stoppedText } from "../../components/SteerPanel";
import { ToolCalls } from "../../components/ToolCalls";
import { turnText, type Exchange, type Guidance, type RtRound, type RtSynthesis, type RtTurn } from "../../streams/roundtable";
import { ConvergenceChart } from "./ConvergenceChart";

const STANCE_TONES: Record<string, string> = { for: "good", against: "bad", conditional: "warn" };

export function StanceBadge({ stance, confidence }: { stance: string | null; confidence: number | null }) {
  if (!stance) return null;
  const figure = confidence === null ? "" : ` · ${Math.round(confidence * 100)}%`;
  return (
    <Badge tone={STANCE_TONES[stance] ?? "neutral"} label={`Stance: ${stance}${confidence === null ? "" : `, confidence ${Math.round(confidence * 100)} percent`}`}>
      {stance}
      {figure}
    </Badge>
  );
}

const TurnCard = memo(function TurnCard({ turn }: { turn: RtTurn }) {
  const streaming = turn.content === null;
  return (
    <li className={`rt-turn${turn.isDevilsAdvocate ? " rt-devil" : ""}`} aria-busy={streaming}>
      <p className="turn-head">
        <strong>{turn.agentName}</strong>
        {turn.agentRole && <span className="muted"> {turn.agentRole}</span>}{" "}
        {turn.isDevilsAdvocate && <Badge tone="warn">devil's advocate</Badge>} <StanceBadge stance={turn.stance} confidence={turn.confidence} />
        {streaming && <Badge tone="live">speaking</Badge>}
      </p>
      {turn.keyPoint && (
        <p className="key-point">
          <strong>Key point:</strong> {turn.keyPoint}
        </p>
      )}
      <ToolCalls calls={turn.toolCalls} />
      <p className="turn-text">{turnText(turn)}</p>
    </li>
  );
});

function RoundSection({ round }: { round: RtRound }) {
  const title = round.roundNumber === 0 ? "Round 0: initial positions" : `Round ${round.roundNumber}: debate`;
  return (
    <section className="rt-round" aria-label={title} data-round={round.roundNumber}>
      <h4>{title}</h4>
      <ol className="rt-turns">
        {round.turns.map((turn) => (
          <TurnCard key={turn.agentId} turn={turn} />
        ))}
      </ol>
    </section>
  );
}

export function SynthesisCard({ synthesis }: { synthesis: RtSynthesis }) {
  const notes = Array.isArray(synthesis.biasNotes) ? synthesis.biasNotes : synthesis.biasNotes ? [synthesis.biasNotes] : [];
  return (
    <section className="card synthesis" aria-label="Synthesis">
      <h4>Synthesis</h4>
      <p className="recommended">
        <strong>Recommended action:</strong> {synthesis.recommendedAction ?? "—"}
      </p>
      <p>{synthesis.summary}</p>
      <div className="watch-grid">
        <div className="watch">
          <h5>Risks</h5>
          <BulletList items={synthesis.riskPoints} />
        </div>
        <div className="watch">
          <h5>Conditions</h5>
          <BulletList items={synthesis.conditions} />
        </div>
        <div className="watch">
          <h5>Devil's advocate's main attack</h5>
          <p>{synthesis.devilsAdvocateMainAttack ?? "—"}</p>
        </div>
      </div>
      <h5>Consensus</h5>
      <BulletList items={synthesis.consensus} />
      <h5>How the debate evolved</h5>
      <p>{synthesis.debateEvolution ?? "—"}</p>
      <dl className="figures">
        <dt>Confidence</dt>
        <dd>{synthesis.confidenceLevel ?? "—"}</dd>
        <dt>Urgency</dt>
        <dd>{synthesis.urgency ?? "—"}</dd>
        <dt>Rounds</dt>
        <dd>{synthesis.roundCount ?? "—"}</dd>
      </dl>
      {synthesis.agentInsights && synthesis.agentInsights.length > 0 && (
        <div className="table-wrap">
          <table>
            <caption>Each participant</caption>
            <thead>
              <tr>
                <th scope="col">Agent</th>
                <th scope="col">Role</th>
                <th scope="col">Stance</th>
                <th scope="col">Shifted</th>
                <th scope="col">Key point</th>
              </tr>
            </thead>
            <tbody>
              {synthesis.agentInsights.map((a, i) => (
                <tr key={i}>
                  <td>{a.name}</td>
                  <td>{a.role ?? ""}</td>
                  <td>{a.stance ?? ""}</td>
                  <td>{a.shifted ? "yes" : "no"}</td>
                  <td>{a.keyPoint ?? ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {notes.length > 0 && (
        <>
          <h5>Bias notes</h5>
          <BulletList items={notes} />
        </>
      )}
    </section>
  );
}

/** What the person who asked said during the debate, where the table first heard it. */
function GuidanceNotes({ guidance }: { guidance: Guidance[] }) {
  if (guidance.length === 0) return null;
  return (
    <ul className="rt-guidance" aria-label="Your messages to the table">
      {guidance.map((g, i) => (
        <li key={i} className="turn turn-human">
          <p className="turn-head">
            <strong>{g.name}</strong> <Badge tone="neutral">you, to the table</Badge>
          </p>
          <p className="turn-text">{g.content}</p>
        </li>
      ))}
    </ul>
  );
}

/** The debate rounds the table ran (or is running), round 0's initial positions not counted. */
export function debateRounds(exchange: Exchange): number {
  return Math.max(0, ...exchange.rounds.map((r) => r.roundNumber), ...exchange.convergence.map((p) => p.roundNumber));
}

function statusOf(exchange: Exchange): string {
  const early = stoppedText(exchange.stoppedBy);
  if (exchange.status === "done") return `Done after ${count(debateRounds(exchange), "debate round")}.${early ? ` ${early}` : ""}`;
  if (exchange.status === "failed") return exchange.error ?? "Failed.";
  if (exchange.status === "waiting") return `Waiting for you after round ${exchange.waitingAfter ?? 0}.`;
  const last = exchange.rounds[exchange.rounds.length - 1];
  if (!last) return "Seating the table…";
  if (exchange.synthesis) return "Writing the synthesis…";
  return last.roundNumber === 0 ? "Round 0: the table states its positions…" : `Round ${last.roundNumber} of the debate…`;
}

export function ExchangeView({ exchange, index, live = false }: { exchange: Exchange; index: number; live?: boolean }) {
  return (
    <article className="exchange" aria-labelledby={`exchange-${index}`}>
      <h3 id={`exchange-${index}`}>
        Question {index + 1}: {exchange.question}
      </h3>
      {live && <StatusLine>{statusOf(exchange)}</StatusLine>}
      {!live && exchange.status === "failed" && <p className="muted">{exchange.error}</p>}
      {exchange.rounds.map((round) => (
        <div key={round.roundNumber}>
          <GuidanceNotes guidance={exchange.guidance.filter((g) => g.roundNumber === round.roundNumber)} />
          <RoundSection round={round} />
        </div>
      ))}
      <GuidanceNotes guidance={exchange.guidance.filter((g) => !exchange.rounds.some((r) => r.roundNumber === g.roundNumber))} />
      {!live && exchange.stoppedBy && <p className="muted">{stoppedText(exchange.stoppedBy)}</p>}
      <h4>Convergence</h4>
      <ConvergenceChart points={exchange.convergence} rounds={debateRounds(exchange)} threshold={exchange.threshold} />
      {exchange.synthesis && <SynthesisCard synthesis={exchange.synthesis} />}
    </article>
  );
}
