/**
 * The council of one question (docs/panel.md, "A council per request"): the panel's models, the judge (the
 * arbitrator), what the judge weighs, and the depth, sent as the request's `models`, `arbitrator`, `criteria`,
 * `depth`, `shadow` and `allow_same_family`. What is left empty is the router's own, and is not sent.
 */
import { useState } from "react";

import { CRITERIA_CHARS, PANEL_SIZE } from "../../api/limits";
import type { ModelChoice } from "./ModelPicker";

type RouterMetadata = NonNullable<ModelChoice["router"]>;

export interface Council {
  models: string[]; // the chosen panel, in the order chosen; none: the router's
  added: string[]; // ids typed in, offered beside the listed models
  judge: string;
  criteria: string;
  depth: "" | "full" | "adaptive"; // "": the router's
  shadow: boolean;
  sameFamily: boolean;
}

export const NO_COUNCIL: Council = {
  models: [], added: [], judge: "", criteria: "", depth: "", shadow: false, sameFamily: false,
};

/** Whether the question runs at adaptive depth: chosen so, or left to a router that is. */
const adaptive = (council: Council, router: RouterMetadata | null) =>
  council.depth === "adaptive" || (council.depth === "" && router?.depth === "adaptive");

/**
 * The request's council fields for what was chosen (only what differs from the router's), or a message when the
 * choice cannot be sent. `debate`: the judge and criteria apply (a raw panel has no judge).
 */
export function councilFields(council: Council, router: RouterMetadata | null, debate: boolean):
    Record<string, unknown> | string {
  const fields: Record<string, unknown> = {};
  const { models } = council;
  if (models.length > 0) {
    if (models.length < PANEL_SIZE.min) {
      return `Choose at least ${PANEL_SIZE.min} models for the panel, or none for the router's own.`;
    }
    if (models.length > PANEL_SIZE.max) {
      return `A panel seats at most ${PANEL_SIZE.max} models; ${models.length} are chosen.`;
    }
    fields.models = models;
    if (council.sameFamily) fields.allow_same_family = true;
  }
  if (debate && council.judge.trim()) fields.arbitrator = council.judge.trim();
  if (debate && council.criteria.trim()) fields.criteria = council.criteria.trim();
  if (council.depth) fields.depth = council.depth;
  if (council.shadow && adaptive(council, router)) fields.shadow = true;
  return fields;
}

/** The council in a few words, for the folded form. */
function summary(council: Council, debate: boolean): string {
  const parts = [council.models.length ? `${council.models.length} models chosen` : "the router's panel"];
  if (debate) parts.push(council.judge.trim() ? `judge ${council.judge.trim()}` : "the router's judge");
  if (debate && council.criteria.trim()) parts.push("criteria");
  const shadow = council.shadow && council.depth === "adaptive" ? " with shadow" : "";
  if (council.depth) parts.push(`${council.depth} depth${shadow}`);
  return parts.join(", ");
}

/** Two chosen models of one listed family, which the API refuses unless same-family panels are allowed. */
function sameFamilyPair(chosen: string[], families: Map<string, string>): [string, string, string] | null {
  const seen = new Map<string, string>();
  for (const model of chosen) {
    const family = families.get(model);
    if (!family) continue;
    const other = seen.get(family);
    if (other) return [other, model, family];
    seen.set(family, model);
  }
  return null;
}

export function CouncilPicker({ models, router, debate, council, onChange }: {
  models: ModelChoice[];
  router: RouterMetadata | null;
  debate: boolean;
  council: Council;
  onChange: (council: Council) => void;
}) {
  const [entry, setEntry] = useState("");
  const plain = models.filter((m) => m.kind === "model");
  const families = new Map(plain.map((m) => [m.id, m.family ?? ""]));
  const offered = [...plain.map((m) => m.id), ...council.added.filter((id) => !families.has(id))];
  const set = (change: Partial<Council>) => onChange({ ...council, ...change });
  const toggle = (id: string, on: boolean) =>
    set({ models: on ? [...council.models.filter((m) => m !== id), id] : council.models.filter((m) => m !== id) });

  function add() {
    const id = entry.trim();
    if (!id) return;
    set({ added: offered.includes(id) ? council.added : [...council.added, id],
          models: council.models.includes(id) ? council.models : [...council.models, id] });
    setEntry("");
  }

  const pair = council.sameFamily ? null : sameFamilyPair(council.models, families);
  const routerPanel = router?.panel?.join(", ");
  return (
    <details className="span-all council">
      <summary>
        Council: <span data-testid="council-summary">{summary(council, debate)}</span>
      </summary>
      <div className="form-grid">
        <span id="council-models-label">Panel</span>
        <div>
          <div className="choices" role="group" aria-labelledby="council-models-label"
               aria-describedby="council-models-hint">
            {offered.map((id) => (
              <label key={id} className="check">
                <input
                  type="checkbox"
                  checked={council.models.includes(id)}
                  onChange={(e) => toggle(id, e.target.checked)}
                />{" "}
                {id}
                {families.get(id) ? <span className="muted" aria-hidden="true"> · {families.get(id)}</span> : null}
              </label>
            ))}
          </div>
          <div className="inline-form">
            <input
              aria-label="Another model"
              placeholder="provider:model"
              value={entry}
              onChange={(e) => setEntry(e.target.value)}
              onKeyDown={(e) => {
                if (e.key === "Enter") {
                  e.preventDefault(); // adds the model; the question is asked with the button
                  add();
                }
              }}
            />
            <button type="button" className="quiet" onClick={add} disabled={!entry.trim()}>
              Add to the panel
            </button>
          </div>
          <p className="hint" id="council-models-hint">
            {PANEL_SIZE.min} to {PANEL_SIZE.max} models of distinct families, each seated. None chosen: the router's own
            panel{routerPanel ? ` (${routerPanel})` : ""}.
          </p>
          {pair && (
            <p role="note" className="note">
              {pair[0]} and {pair[1]} are both of the {pair[2]} family: the API refuses such a panel unless two of one
              family may sit.
            </p>
          )}
          {council.models.length > 0 && (
            <label className="check">
              <input
                type="checkbox"
                checked={council.sameFamily}
                onChange={(e) => set({ sameFamily: e.target.checked })}
              />{" "}
              Let two models of one family sit
            </label>
          )}
        </div>
        {debate && (
          <>
            <label htmlFor="council-judge">Judge</label>
            <div>
              <input
                id="council-judge"
                list="council-judge-models"
                placeholder={router?.arbitrator ? `the router's: ${router.arbitrator}` : "the router's"}
                value={council.judge}
                onChange={(e) => set({ judge: e.target.value })}
                aria-describedby="council-judge-hint"
              />
              <datalist id="council-judge-models">
                {offered.map((id) => (
                  <option key={id} value={id} />
                ))}
              </datalist>
              <p className="hint" id="council-judge-hint">
                The arbitrator: it writes the synthesis, judges best of n and settles what a rule cannot. A family
                outside the panel's judges most fairly.
              </p>
            </div>
            <label htmlFor="council-criteria">Criteria</label>
            <div>
              <textarea
                id="council-criteria"
                rows={2}
                maxLength={CRITERIA_CHARS}
                value={council.criteria}
                onChange={(e) => set({ criteria: e.target.value })}
                aria-describedby="council-criteria-hint"
              />
              <p className="hint" id="council-criteria-hint">
                Optional: what the judge weighs the answers by (the panelists never see it).
              </p>
            </div>
          </>
        )}
        <label htmlFor="council-depth">Depth</label>
        <div>
          <select
            id="council-depth"
            value={council.depth}
            onChange={(e) => set({ depth: e.target.value as Council["depth"] })}
          >
            <option value="">The router's ({router?.depth ?? "full"})</option>
            <option value="full">Full: every seat at once</option>
            <option value="adaptive">Adaptive: two seats first, the rest only when they disagree</option>
          </select>
          {adaptive(council, router) && (
            <label className="check">
              <input type="checkbox" checked={council.shadow} onChange={(e) => set({ shadow: e.target.checked })} />{" "}
              Shadow: ask the whole panel anyway, to see whether stopping early would change the answer
            </label>
          )}
        </div>
      </div>
    </details>
  );
}
