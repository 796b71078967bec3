/** A workflow run as the designer's overlay and run log show it (`run_start node_start chunk tool_call tool_result
 * progress node_end done`). */
import type { StreamEvent } from "../api/sse";
import type { UsageTotals } from "../api/usage";
import { withToolEvent, type ToolCall } from "./tools";
import { retracted, withoutPieces, type Piece } from "./useStream";

export type NodeStatus = "running" | "done" | "failed" | "cancelled";

/** One execution of a node (a node in a loop runs several times). */
export interface Step {
  node: string;
  type: string;
  attempt: number;
  startSeq: number | null;
  status: NodeStatus;
  pieces: Piece[];
  progress: { kind: string; data: unknown }[];
  keys: string[];
  output: unknown;
  usage: unknown;
  toolCalls: ToolCall[];
}

export interface WorkflowRunView {
  runId: string | null;
  name: string;
  steps: Step[];
  status: "waiting" | "running" | "done" | "failed" | "cancelled";
  state: Record<string, unknown> | null;
  usage: UsageTotals | null;
  error: { message: string; node: string | null } | null;
}

export const emptyWorkflowRun = (): WorkflowRunView => ({
  runId: null,
  name: "",
  steps: [],
  status: "waiting",
  state: null,
  usage: null,
  error: null,
});

/** The latest step of each node: what the canvas overlay paints on it. */
export function latestSteps(view: WorkflowRunView): Map<string, Step> {
  const latest = new Map<string, Step>();
  for (const step of view.steps) latest.set(step.node, step);
  return latest;
}

export function stepText(step: Step): string {
  return step.pieces.map((p) => p.text).join("");
}

function updateLatest(view: WorkflowRunView, node: string, update: (step: Step) => Step): WorkflowRunView {
  for (let i = view.steps.length - 1; i >= 0; i -= 1) {
    if (view.steps[i].node === node) {
      const steps = view.steps.slice();
      steps[i] = update(steps[i]);
      return { ...view, steps };
    }
  }
  return view;
}

export function workflowReducer(view: WorkflowRunView, { event, data, id }: StreamEvent): WorkflowRunView {
  switch (event) {
    case "run_start":
      return { ...view, runId: data.runId ?? view.runId, name: data.name ?? view.name, status: "running" };
    case "node_start":
      return {
        ...view,
        status: "running",
        steps: [...view.steps, {
          node: data.node, type: data.type, attempt: data.attempt ?? 1, startSeq: id, status: "running",
          pieces: [], progress: [], keys: [], output: undefined, usage: undefined, toolCalls: [],
        }],
      };
    case "chunk":
      return updateLatest(view, data.node, (s) => ({ ...s, pieces: [...s.pieces, { seq: id, text: String(data.content ?? "") }] }));
    case "tool_call":
    case "tool_result":
      return updateLatest(view, data.node, (s) => ({ ...s, toolCalls: withToolEvent(s.toolCalls, event, data) }));
    case "progress":
      return updateLatest(view, data.node, (s) => ({ ...s, progress: [...s.progress, { kind: data.kind, data: data.data }] }));
    case "node_end":
      return updateLatest(view, data.node, (s) => ({
        ...s, status: "done", keys: data.keys ?? [], output: data.output, usage: data.usage,
      }));
    case "done":
      return { ...view, status: "done", state: data.state ?? null, usage: data.usage ?? null };
    case "error": {
      const failed = data.node ? updateLatest(view, data.node, (s) => ({ ...s, status: "failed" })) : view;
      return { ...failed, status: "failed", error: { message: data.error ?? data.message ?? "The run failed", node: data.node ?? null } };
    }
    case "cancelled":
      return {
        ...view,
        status: "cancelled",
        steps: view.steps.map((s) => (s.status === "running" ? { ...s, status: "cancelled" } : s)),
        error: { message: data.message ?? "Cancelled", node: null },
      };
    case "retract": {
      const seqs = retracted({ event, data, id });
      const steps = view.steps
        .filter((s) => s.startSeq === null || !seqs.has(s.startSeq))
        .map((s) => ({ ...s, pieces: withoutPieces(s.pieces, seqs) }));
      return { ...view, steps };
    }
    default:
      return view;
  }
}
