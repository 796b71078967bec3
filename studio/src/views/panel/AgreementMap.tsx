/**
 * The disagreement map of a panel's answers (`_meta.analysis`, docs/panel.md "The disagreement map"): how much the
 * answers agree, overall and pair by pair, where they contradict each other (each model's stance side by side),
 * what every model says, what some leave out, what only one says, and what no answer touches.
 */
import type { ReactNode } from "react";

import { Badge } from "../../components/ui";
import type { Analysis, Contradiction } from "../../streams/panel";

/** 0.923 → "92%" (the Studio writes shares as whole percentages). */
export const percent = (share: number) => `${Math.round(share * 100)}%`;

/** A share drawn as a short bar; the figure beside it is the text, the bar only shows it. */
export function ShareBar({ share }: { share: number }) {
  const width = Math.max(0, Math.min(1, share)) * 100;
  return (
    <span className="share-bar" aria-hidden="true">
      <span style={{ width: `${width}%` }} />
    </span>
  );
}

/** A part of the map: a heading with its count, then its entries, or `empty` when it has none. */
function Part({ id, title, n, empty, children }: { id: string; title: string; n: number; empty: string;
                                                   children: ReactNode }) {
  return (
    <section className="map-part" aria-labelledby={id}>
      <h4 id={id}>
        {title} <Badge tone="neutral">{n}</Badge>
      </h4>
      {n > 0 ? children : <p className="muted">{empty}</p>}
    </section>
  );
}

export function AgreementMap({ analysis }: { analysis: Analysis }) {
  const { pairs, consensus, contradictions, partialCoverage, uniqueInsights, blindSpots } = analysis;
  return (
    <section className="card agreement" aria-labelledby="agreement-title">
      <h3 id="agreement-title">Agreement</h3>
      <div className="agreement-figures">
        <p className="agreement-score">
          <strong data-testid="agreement-score">{percent(analysis.agreement)}</strong>{" "}
          <ShareBar share={analysis.agreement} /> <span className="muted">overall</span>
        </p>
        {pairs.length > 1 && (
          <ul className="pairs" aria-label="Agreement of each pair">
            {pairs.map((pair) => (
              <li key={pair.models.join("|")}>
                <span className="pair-models">{pair.models.join(" · ")}</span>
                <ShareBar share={pair.agreement} />
                <span className="pair-figure">{percent(pair.agreement)}</span>
              </li>
            ))}
          </ul>
        )}
      </div>
      <Part id="map-contradictions" title="Contradictions" n={contradictions.length} empty="No contradictions found.">
        <ol className="rows">
          {contradictions.map((c, i) => (
            <ContradictionRow key={i} contradiction={c} />
          ))}
        </ol>
      </Part>
      <Part id="map-consensus" title="Consensus" n={consensus.length} empty="No point that every model makes.">
        <ul>
          {consensus.map((point, i) => (
            <li key={i}>{point}</li>
          ))}
        </ul>
      </Part>
      <Part id="map-partial" title="Partial coverage" n={partialCoverage.length}
            empty="No point that some models make and others leave out.">
        <ul className="rows">
          {partialCoverage.map((p, i) => (
            <li key={i}>
              {p.point}
              <p className="hint">
                Made by {p.models.join(", ")}; left out by <strong>{p.missing.join(", ")}</strong>.
              </p>
            </li>
          ))}
        </ul>
      </Part>
      <Part id="map-insights" title="Unique insights" n={uniqueInsights.length}
            empty="No point that only one model makes.">
        <Insights insights={uniqueInsights} />
      </Part>
      <Part id="map-blind-spots" title="Blind spots" n={blindSpots.length}
            empty="No blind spots: every term of the question is mentioned.">
        <p className="hint">Terms of the question that no answer mentions:</p>
        <ul className="chips">
          {blindSpots.map((term, i) => (
            <li key={i}>{term}</li>
          ))}
        </ul>
      </Part>
      <p className="hint">
        Read from the answers' words by Parley ({analysis.method}), no model asked: the same answers always give the
        same map, and one idea in different words reads as less agreement than it is.
      </p>
    </section>
  );
}

/** One contradiction: its topic, then each model's stance side by side. */
function ContradictionRow({ contradiction }: { contradiction: Contradiction }) {
  return (
    <li className="contradiction">
      <p>
        On <strong>{contradiction.topic}</strong>:
      </p>
      <ul className="stances">
        {contradiction.stances.map((s) => (
          <li key={s.model} aria-label={`${s.model}'s stance`}>
            <span className="stance-model">{s.model}</span>
            <q>{s.stance}</q>
          </li>
        ))}
      </ul>
    </li>
  );
}

/** Unique insights grouped by model, in the order the models first appear. */
function Insights({ insights }: { insights: Analysis["uniqueInsights"] }) {
  const byModel = new Map<string, string[]>();
  for (const { model, insight } of insights) byModel.set(model, [...(byModel.get(model) ?? []), insight]);
  return (
    <dl className="insights">
      {[...byModel].map(([model, items]) => (
        <div key={model}>
          <dt>{model}</dt>
          <dd>
            <ul>
              {items.map((item, i) => (
                <li key={i}>{item}</li>
              ))}
            </ul>
          </dd>
        </div>
      ))}
    </dl>
  );
}
