/**
 * A duel as the viewer shows it, built from its events (`init start chunk tool_call tool_result message synthesizing
 * synthesis done`), and how it is steered (`human waiting resumed stopping`, docs/steering.md).
 */
import type { StreamEvent } from "../api/sse";
import { storedToolCalls, withToolEvent, type ToolCall } from "./tools";
import { retracted, updateLast, withoutPieces, type Piece } from "./useStream";

export type Side = "user" | "opponent" | "human";

export interface Profile {
  name: string;
  title?: string;
  bio?: string;
  stance?: string;
  avatar?: string;
  traits?: string[];
  softMemory?: { traits?: string[]; interests?: string[] };
}

export interface DuelSynthesis {
  consensus: string[];
  disagreements: string[];
  winner: "user" | "opponent" | "tie";
  winnerReason: string;
  conclusion: string;
  recommendations: string[];
}

export interface DuelTurn {
  role: Side;
  name: string;
  startSeq: number | null;
  pieces: Piece[];
  content: string | null; // the finished message; null while it streams
  toolCalls: ToolCall[]; // the tools the side called during the turn
}

export type DuelStatus = "connecting" | "debating" | "waiting" | "judging" | "done" | "failed" | "cancelled";

export interface DuelView {
  id: string | null;
  topic: string;
  userProfile: Profile | null;
  opponentProfile: Profile | null;
  turns: DuelTurn[];
  status: DuelStatus;
  synthesis: DuelSynthesis | null;
  error: string | null;
  /** Why it went to its verdict early (`stopping`, `done.stoppedBy`): user, budget. */
  stoppedBy: string | null;
  /** The turns said before the boundary it waits at, while it waits for the person. */
  waitingAfter: number | null;
}

export const emptyDuel = (): DuelView => ({
  id: null,
  topic: "",
  userProfile: null,
  opponentProfile: null,
  turns: [],
  status: "connecting",
  synthesis: null,
  error: null,
  stoppedBy: null,
  waitingAfter: null,
});

export function turnText(turn: DuelTurn): string {
  return turn.content ?? turn.pieces.map((p) => p.text).join("");
}

const open = (role: Side) => (turn: DuelTurn) => turn.role === role && turn.content === null;

export function duelReducer(view: DuelView, { event, data, id }: StreamEvent): DuelView {
  switch (event) {
    case "init":
      return {
        ...view,
        id: data.id,
        topic: data.topic,
        userProfile: data.userProfile,
        opponentProfile: data.opponentProfile,
        status: "debating",
      };
    case "start":
      return {
        ...view,
        status: "debating",
        turns: [...view.turns, { role: data.role, name: data.name, startSeq: id, pieces: [], content: null, toolCalls: [] }],
      };
    case "chunk": {
      const turns = updateLast(view.turns, open(data.role), (t) => ({
        ...t,
        pieces: [...t.pieces, { seq: id, text: String(data.content ?? "") }],
      }));
      return turns ? { ...view, turns } : view;
    }
    case "tool_call":
    case "tool_result": {
      const turns = updateLast(view.turns, open(data.role), (t) => ({
        ...t,
        toolCalls: withToolEvent(t.toolCalls, event, data),
      }));
      return turns ? { ...view, turns } : view;
    }
    case "message": {
      const toolCalls = storedToolCalls(data.toolCalls);
      const turns = updateLast(view.turns, open(data.role), (t) => ({
        ...t, name: data.name, content: data.content, toolCalls: toolCalls.length ? toolCalls : t.toolCalls,
      }));
      return {
        ...view,
        turns: turns ?? [...view.turns, { role: data.role, name: data.name, startSeq: id, pieces: [], content: data.content,
          toolCalls }],
      };
    }
    case "human":
      return {
        ...view,
        turns: [...view.turns, { role: "human", name: data.name, startSeq: id, pieces: [], content: data.content,
          toolCalls: [] }],
      };
    case "waiting":
      return { ...view, status: "waiting", waitingAfter: data.position ?? null };
    case "resumed":
      return { ...view, status: view.status === "waiting" ? "debating" : view.status, waitingAfter: null };
    case "stopping":
      return { ...view, stoppedBy: data.by ?? view.stoppedBy };
    case "synthesizing":
      return { ...view, status: "judging", waitingAfter: null };
    case "synthesis":
      return { ...view, synthesis: data };
    case "done":
      return { ...view, status: "done", synthesis: data.synthesis ?? view.synthesis, stoppedBy: data.stoppedBy ?? view.stoppedBy };
    case "error":
      return { ...view, status: "failed", error: data.message ?? data.error ?? "The debate failed" };
    case "cancelled":
      return { ...view, status: "cancelled", error: data.message ?? "Cancelled" };
    case "retract": {
      const seqs = retracted({ event, data, id });
      const turns = view.turns
        .filter((t) => t.startSeq === null || !seqs.has(t.startSeq))
        .map((t) => ({ ...t, pieces: withoutPieces(t.pieces, seqs) }));
      return { ...view, turns };
    }
    default:
      return view;
  }
}
