/** The duel as it happens: both personas, the turns streaming in, round progress, then the verdict. */
import { memo } from "react";

import { stoppedText } from "../../components/SteerPanel";
import { ToolCalls } from "../../components/ToolCalls";
import { Badge, BulletList, count, StatusLine } from "../../components/ui";
import { turnText, type DuelTurn, type DuelView, type Profile } from "../../streams/duel";

/** One of the two judgements the verdict was drawn from (`verdicts` of `GET /api/debate/{id}`). */
export interface Verdict {
  order: string;
  speakerA: string;
  speakerB: string;
  winner: string;
  winnerReason: string;
}

export function DuelViewer({ view, rounds, verdicts }: { view: DuelView; rounds: number | null; verdicts: Verdict[] | null }) {
  const debaters = view.turns.filter((t) => t.role !== "human");
  const started = debaters.length;
  const round = Math.max(1, Math.ceil(started / 2));
  const speaking = debaters.find((t) => t.content === null);
  const total = rounds ? rounds * 2 : null;
  const finished = debaters.filter((t) => t.content !== null).length;
  const early = stoppedText(view.stoppedBy);
  // Each debater's turn with its round; the person's messages stand between them.
  let said = 0;
  const numbered = view.turns.map((turn) => ({ turn, round: turn.role === "human" ? null : Math.floor(said++ / 2) + 1 }));

  let status: string;
  switch (view.status) {
    case "connecting":
      status = "Choosing an opponent for the topic…";
      break;
    case "debating":
      status = speaking
        ? `Round ${round}${rounds ? ` of ${rounds}` : ""}: ${speaking.name} is speaking`
        : `Round ${round}${rounds ? ` of ${rounds}` : ""}`;
      break;
    case "waiting":
      status = `Waiting for you after turn ${view.waitingAfter ?? finished}.`;
      break;
    case "judging":
      status = `The debate is over; the judges are deliberating…${early ? ` ${early}` : ""}`;
      break;
    case "done":
      status = `Finished after ${count(Math.ceil(started / 2), "round")}.${early ? ` ${early}` : ""}`;
      break;
    case "cancelled":
      status = "Cancelled.";
      break;
    default:
      status = `Failed: ${view.error}`;
  }

  return (
    <section className="duel" aria-labelledby="duel-topic">
      <h2 id="duel-topic">{view.topic || "Starting the debate…"}</h2>
      <StatusLine>{status}</StatusLine>
      {total !== null && (
        <div className="progress-row">
          <label htmlFor="duel-progress">Turns</label>
          <progress id="duel-progress" max={total} value={finished} />
          <span>
            {finished} / {total}
          </span>
        </div>
      )}
      <div className="personas">
        <PersonaCard side="user" profile={view.userProfile} />
        <PersonaCard side="opponent" profile={view.opponentProfile} />
      </div>
      <ol className="turns" aria-label="Transcript">
        {numbered.map(({ turn, round }, i) => (
          <TurnItem key={i} turn={turn} round={round} />
        ))}
      </ol>
      {view.error && view.status === "failed" && (
        <p role="alert" className="error">
          {view.error}
        </p>
      )}
      {view.synthesis && <VerdictCard view={view} verdicts={verdicts} />}
    </section>
  );
}

function PersonaCard({ side, profile }: { side: "user" | "opponent"; profile: Profile | null }) {
  const traits = profile?.traits ?? profile?.softMemory?.traits ?? [];
  return (
    <article className={`persona persona-${side}`} aria-label={side === "user" ? "Your persona" : "Opponent"}>
      <p className="persona-side">{side === "user" ? "Your persona" : "Opponent"}</p>
      <h3>{profile?.name ?? "…"}</h3>
      {profile?.title && <p className="muted">{profile.title}</p>}
      {profile?.bio && <p>{profile.bio}</p>}
      {profile?.stance && (
        <p>
          <strong>Stance:</strong> {profile.stance}
        </p>
      )}
      {traits.length > 0 && <p className="muted">{traits.join(" · ")}</p>}
    </article>
  );
}

// Memoised: while one turn streams, the finished ones are not rendered again.
const TurnItem = memo(function TurnItem({ turn, round }: { turn: DuelTurn; round: number | null }) {
  const streaming = turn.content === null;
  return (
    <li className={`turn turn-${turn.role}`} data-role={turn.role} aria-busy={streaming}>
      <p className="turn-head">
        <strong>{turn.name}</strong>{" "}
        {round === null ? <Badge tone="neutral">you, to the debaters</Badge> : <span className="muted">round {round}</span>}
        {streaming && <Badge tone="live">speaking</Badge>}
      </p>
      <ToolCalls calls={turn.toolCalls} />
      <p className="turn-text">{turnText(turn)}</p>
    </li>
  );
});

function winnerName(view: DuelView, winner: string): string {
  if (winner === "user") return view.userProfile?.name ?? "Your persona";
  if (winner === "opponent") return view.opponentProfile?.name ?? "The opponent";
  return "Tie";
}

function VerdictCard({ view, verdicts }: { view: DuelView; verdicts: Verdict[] | null }) {
  const s = view.synthesis!;
  return (
    <section className="card verdict" aria-labelledby="verdict-title">
      <h3 id="verdict-title">Verdict</h3>
      <p className="winner">
        Winner: <strong data-testid="winner">{winnerName(view, s.winner)}</strong>
      </p>
      <p>{s.winnerReason}</p>
      <h4>Conclusion</h4>
      <p>{s.conclusion}</p>
      <div className="columns">
        <div>
          <h4>Consensus</h4>
          <BulletList items={s.consensus} />
        </div>
        <div>
          <h4>Disagreements</h4>
          <BulletList items={s.disagreements} />
        </div>
      </div>
      <h4>Recommendations</h4>
      <BulletList items={s.recommendations} />
      <h4>Both judges</h4>
      {verdicts === null ? (
        <p className="muted">Loading the two judgements…</p>
      ) : (
        <div className="table-wrap">
          <table>
            <caption className="sr-only">The two judgements, speakers in debate order then swapped</caption>
            <thead>
              <tr>
                <th scope="col">Judge</th>
                <th scope="col">Speaker order</th>
                <th scope="col">Winner</th>
                <th scope="col">Reason</th>
              </tr>
            </thead>
            <tbody>
              {verdicts.map((v, i) => (
                <tr key={i}>
                  <td>{i + 1}</td>
                  <td>{v.order === "swapped" ? "swapped" : "as debated"}</td>
                  <td>{winnerName(view, v.winner)}</td>
                  <td>{v.winnerReason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
