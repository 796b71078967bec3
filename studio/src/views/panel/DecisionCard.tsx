/**
 * How a debate decided (docs/panel.md, "Decision rules"): the rule, who decided, and the rule's own record: a
 * vote's tally, a rank's Borda ranking with each reviewer's ranking, best-of-n's two readings. Reviews and
 * verdicts show as their events arrive; `_meta.decision` completes them at the end.
 */
import { DataTable } from "../../components/ui";
import type { Decision, Review, Verdict } from "../../streams/panel";

export const RULE_NAMES: Record<string, string> = {
  synthesis: "Synthesis",
  vote: "Majority vote",
  rank: "Ranking (Borda count)",
  "best-of-n": "Best of n",
  analysis: "Analysis: the map, no judge",
};

const READINGS: Record<string, string> = { as_given: "Panel order", reversed: "Reversed" };

/** One sentence: who decided, and whose answer is returned. */
function decidedBy(d: Decision): string {
  switch (d.decidedBy) {
    case "majority":
      return `The majority chose ${d.winner}'s answer (${d.answer}); it is returned as written.`;
    case "borda":
      return `The Borda count chose ${d.winner}'s answer; it is returned as written.`;
    case "agreement":
      return `The first two seats agreed (adaptive depth): ${d.winner}'s answer is returned as written.`;
    case "judge":
      return `The judge ${d.judge} chose ${d.winner}'s answer in both readings; it is returned as written.`;
    case "none":
      if (d.reason) return `No one decided: ${d.reason}.`;
      return "No one decides under this rule: every answer comes back labelled, with the map of where they agree.";
    default:
      if (!d.arbitrator) return `The rule could not decide (${d.reason}): the arbitrator answers.`;
      if (d.rule === "synthesis") return `The arbitrator ${d.arbitrator} wrote the answer from every panelist's.`;
      return `The rule could not decide (${d.reason}), so the arbitrator ${d.arbitrator} wrote the answer.`;
  }
}

/** `familyNote`: show the decision's note on a decider of a panelist's family (where the user could choose another). */
export function DecisionCard({
  decision,
  reviews,
  verdicts,
  familyNote,
}: {
  decision: Decision | null;
  reviews: Review[];
  verdicts: Verdict[];
  familyNote: boolean;
}) {
  const rule = decision?.rule ?? (verdicts.length > 0 ? "best-of-n" : "rank");
  const allReviews = decision?.reviews ?? reviews;
  const allVerdicts = decision?.verdicts ?? verdicts;
  return (
    <section className="card decision" aria-labelledby="decision-title">
      <h3 id="decision-title">Decision: {RULE_NAMES[rule] ?? rule}</h3>
      <p data-testid="decided-by">{decision ? decidedBy(decision) : "Deciding…"}</p>
      {familyNote && decision?.independent === false && decision.note && (
        <p role="note" aria-label="Not an outside family" className="note">
          {decision.note}
        </p>
      )}
      {decision?.tally && <Tally decision={decision} />}
      {decision?.ranking && <Ranking decision={decision} />}
      {allReviews.length > 0 && <Reviews reviews={allReviews} />}
      {allVerdicts.length > 0 && <Verdicts verdicts={allVerdicts} />}
    </section>
  );
}

function Tally({ decision }: { decision: Decision }) {
  const unreadable = decision.unreadable ?? [];
  return (
    <>
      <DataTable
        caption={
          <>
            Tally (answers read as <code>{decision.answerRule}</code>)
          </>
        }
        columns={["Answer", "Votes", "Panelists"]}
        rows={(decision.tally ?? []).map((t) => [t.answer, t.votes, t.panelists.join(", ")])}
      />
      {unreadable.length > 0 && <p className="muted">Could not be read: {unreadable.join(", ")}.</p>}
    </>
  );
}

function Ranking({ decision }: { decision: Decision }) {
  return (
    <DataTable
      caption={`Borda ranking${decision.seed !== undefined ? ` (orders seeded with ${decision.seed})` : ""}`}
      columns={["Place", "Panelist", "Points", "Reviews", "Points a review"]}
      rows={(decision.ranking ?? []).map((r, i) => [i + 1, r.panelist, r.points, r.reviews, r.score.toFixed(2)])}
    />
  );
}

/** Each reviewer's ranking of the others' answers (never its own), and the order it read them in. */
function Reviews({ reviews }: { reviews: Review[] }) {
  return (
    <>
      <h4 id="reviews-title">Reviews</h4>
      <ul className="rows" aria-labelledby="reviews-title">
        {reviews.map((r) => (
          <li key={r.reviewer} aria-label={`Review by ${r.reviewer}`}>
            <strong>{r.reviewer}</strong>
            {r.success && r.ranking ? (
              <>
                {" "}
                ranked: <span data-testid="ranking">{r.ranking.join(" > ")}</span>
              </>
            ) : (
              <span className="muted"> abstained{r.error ? ` (${r.error})` : ""}</span>
            )}
            {r.shown && <p className="hint">Read in the order {r.shown.join(", ")}.</p>}
            {r.reason && <p>{r.reason}</p>}
          </li>
        ))}
      </ul>
    </>
  );
}

/** Best-of-n's two readings: the judge's pick reading the answers in panel order, then reversed. */
function Verdicts({ verdicts }: { verdicts: Verdict[] }) {
  return (
    <DataTable
      caption="Verdicts in two reading orders"
      columns={["Reading", "Judge", "Pick", "Reason"]}
      rowHeaders
      rows={verdicts.map((v) => [
        READINGS[v.order] ?? v.order,
        v.judge ?? "—",
        v.panelist ?? `abstained${v.error ? ` (${v.error})` : ""}`,
        v.reason || "—",
      ])}
    />
  );
}
