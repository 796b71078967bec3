/** A panel run as the side-by-side view shows it, from the run engine's panel events. */
import type { StreamEvent } from "../api/sse";
import { retracted, withoutPieces, type Piece } from "./useStream";

export interface Seat {
  index: number;
  model: string;
  status: "waiting" | "answered" | "failed";
  answer: string | null;
  tokens: number | null;
  cost: number | null;
  latencyMs: number | null;
  error: string | null;
  detail: string | null;
}

export interface Fallback {
  role: string;
  model: string;
  error: string;
  detail?: string;
}

export interface PanelView {
  seats: Seat[];
  answering: { role: string; model: string } | null;
  fallbacks: Fallback[];
  pieces: Piece[];
  answer: string | null; // the final answer, once `done` brings the completion
  completion: Completion | null;
  status: "waiting" | "panel" | "answering" | "done" | "failed" | "cancelled";
  error: string | null;
}

export interface Completion {
  id: string;
  model: string;
  choices: { message: { content: string } }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number };
  _meta?: Record<string, unknown>;
}

export const emptyPanel = (): PanelView => ({
  seats: [],
  answering: null,
  fallbacks: [],
  pieces: [],
  answer: null,
  completion: null,
  status: "waiting",
  error: null,
});

const seat = (index: number, model: string): Seat => ({
  index,
  model,
  status: "waiting",
  answer: null,
  tokens: null,
  cost: null,
  latencyMs: null,
  error: null,
  detail: null,
});

export function answerText(view: PanelView): string {
  return view.answer ?? view.pieces.map((p) => p.text).join("");
}

export function panelReducer(view: PanelView, { event, data, id }: StreamEvent): PanelView {
  switch (event) {
    case "panelists":
      return { ...view, status: "panel", seats: (data.models ?? []).map((m: string, i: number) => seat(i, m)) };
    case "panelist": {
      const seats = view.seats.slice();
      while (seats.length <= data.index) seats.push(seat(seats.length, data.model));
      seats[data.index] = {
        ...seats[data.index],
        model: data.model,
        status: data.success ? "answered" : "failed",
        answer: data.answer ?? null,
        tokens: data.tokens ?? null,
        cost: data.cost ?? null,
        latencyMs: data.latencyMs ?? null,
        error: data.error ?? null,
        detail: data.detail ?? null,
      };
      return { ...view, seats };
    }
    case "answering":
      return { ...view, status: "answering", answering: { role: data.role, model: data.model } };
    case "fallback":
      return { ...view, fallbacks: [...view.fallbacks, data] };
    case "chunk":
      return { ...view, status: view.status === "panel" ? "answering" : view.status,
               pieces: [...view.pieces, { seq: id, text: String(data.content ?? "") }] };
    case "done": {
      const completion: Completion | null = data.completion ?? null;
      return {
        ...view,
        status: "done",
        completion,
        answer: completion?.choices?.[0]?.message?.content ?? null,
      };
    }
    case "error":
      return { ...view, status: "failed", error: data.error?.message ?? data.message ?? "The panel failed" };
    case "cancelled":
      return { ...view, status: "cancelled", error: data.message ?? "Cancelled" };
    case "retract":
      return { ...view, pieces: withoutPieces(view.pieces, retracted({ event, data, id })) };
    default:
      return view;
  }
}
