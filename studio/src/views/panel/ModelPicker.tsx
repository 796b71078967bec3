/**
 * The panel view's model picker: what `GET /v1/models` lists for the key (its routers with their panel,
 * arbitrator and rule; the Self-MoA preset; plain models), grouped, and a summary of the chosen one.
 */
import { useEffect, useState } from "react";

import type { components } from "../../api/openapi";
import { useSession } from "../../session/session";

export const PRESET = "router/debate";

type ModelEntry = components["schemas"]["Model"];
type RouterMetadata = components["schemas"]["RouterMetadata"];

/** A choice of the model picker: a router (with what it does, when listed) or a plain model. */
export interface ModelChoice {
  id: string;
  kind: "router" | "model";
  router: RouterMetadata | null; // what a router does; null for a plain model, or when /v1/models was not read
  family: string | null; // a plain model's family
}

const FALLBACK: ModelChoice[] = [{ id: PRESET, kind: "router", router: null, family: null }];

function choiceOf({ id, metadata }: ModelEntry): ModelChoice {
  return metadata.kind === "router"
    ? { id, kind: "router", router: metadata, family: null }
    : { id, kind: "model", router: null, family: metadata.family };
}

export const isRouter = (choice: ModelChoice | undefined) => choice?.kind !== "model";

/**
 * Whether a warning about families is one the user can act on: the models listed span more than one family, so a
 * router may seat an arbitrator (or a judge) of a family outside its panel's. Not on a one-model install (the
 * embedded model alone: every seat and the arbitrator are one model), nor while the list is unread.
 */
export function familiesToChoose(models: ModelChoice[]): boolean {
  return new Set(models.filter((m) => m.kind === "model").map((m) => m.family)).size > 1;
}

/** What `GET /v1/models` lists for this key: its routers, the Self-MoA preset, plain models. The preset alone
 * if the list cannot be read (the request itself may still work). */
export function useModels(): { models: ModelChoice[]; error: unknown } {
  const { api, allows } = useSession();
  const [models, setModels] = useState<ModelChoice[]>(FALLBACK);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    if (!allows("chat")) return;
    let live = true;
    api<components["schemas"]["ModelList"]>("/v1/models").then(
      (list) => live && list.data.length > 0 && setModels(list.data.map(choiceOf)),
      (err) => live && setError(err),
    );
    return () => {
      live = false;
    };
  }, [api, allows]);
  return { models, error };
}

/** The picker's options, grouped: routers, Self-MoA presets, plain models. */
export function ModelOptions({ models }: { models: ModelChoice[] }) {
  const groups: [string, ModelChoice[]][] = [
    ["Routers", models.filter((m) => isRouter(m) && !m.id.startsWith("self-moa/"))],
    ["Self-MoA: one model sampled", models.filter((m) => isRouter(m) && m.id.startsWith("self-moa/"))],
    ["Models", models.filter((m) => !isRouter(m))],
  ];
  return (
    <>
      {groups
        .filter(([, items]) => items.length > 0)
        .map(([label, items]) => (
          <optgroup key={label} label={label}>
            {items.map((m) => (
              <option key={m.id} value={m.id}>
                {m.id}
              </option>
            ))}
          </optgroup>
        ))}
    </>
  );
}

/** What a request to the chosen model does: a router's panel, arbitrator and rule, or one plain model; and, where
 * another family could be chosen (`familyNotes`), an arbitrator of a panelist's family noted. */
export function ModelSummary({ id, choice, familyNotes }: { id: string; choice: ModelChoice | undefined;
                               familyNotes: boolean }) {
  if (!choice) return null;
  if (choice.kind === "model") {
    return (
      <p className="hint" id={id}>
        One model of the {choice.family} family answers: no panel and no rule.
      </p>
    );
  }
  const router = choice.router;
  if (!router) return <p className="hint" id={id}>A router: its panel answers, then its rule decides.</p>;
  const rule = router.rule + (router.answerRule ? ` (answers read as ${router.answerRule})` : "");
  return (
    <div id={id}>
      <dl className="figures" aria-label={`What ${choice.id} does`}>
        <dt>Panel</dt>
        <dd>
          {router.panel
            ? router.panel.join(", ")
            : `its models (${router.models.join(", ")}) cannot seat ${router.panelSize} distinct families`}
        </dd>
        <dt>Arbitrator</dt>
        <dd>{router.arbitrator ?? "—"}</dd>
        <dt>Rule</dt>
        <dd>{rule}</dd>
        <dt>Depth</dt>
        <dd>{router.depth === "adaptive" ? "adaptive: two seats first, the rest only when they disagree" : "full"}</dd>
      </dl>
      {familyNotes && router.arbitrator && !router.independentArbitrator && (
        <p role="note" className="note">
          The arbitrator {router.arbitrator} is of a panelist's family, and judges favour their own family's
          answers: give the router an arbitrator of another family.
        </p>
      )}
    </div>
  );
}
