/** Runs as `GET /v1/runs` lists them: every duel, panel, round-table question and workflow run. */

import type { UsageTotals } from "../../api/usage";

export type RunKind = "duel" | "panel" | "roundtable" | "workflow";

export interface RunSummary {
  id: string;
  kind: RunKind;
  status: "queued" | "running" | "completed" | "failed" | "cancelled";
  title: string;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  worker: string | null;
  usage: UsageTotals | null;
  ref: Record<string, string | number | null> | null;
  error: string | null;
}

export interface RunDetail extends RunSummary {
  input: Record<string, unknown> | null;
  result: unknown;
}

export const KIND_LABELS: Record<RunKind, string> = {
  duel: "Duel",
  panel: "Panel",
  roundtable: "Round table",
  workflow: "Workflow",
};
