/** A panel run as the side-by-side view shows it, from the run engine's panel events. */
import type { StreamEvent } from "../api/sse";
import { storedToolCalls, withToolEvent, type ToolCall as ToolRun } from "./tools";
import { retracted, withoutPieces, type Piece } from "./useStream";

export interface Seat {
  index: number;
  model: string;
  status: "waiting" | "answered" | "failed" | "skipped"; // skipped: adaptive depth stopped before its turn
  answer: string | null;
  tokens: number | null;
  cachedTokens: number; // of `tokens`: prompt tokens read from the provider's prompt cache
  reasoningTokens: number; // of `tokens`: spent reasoning
  cost: number | null;
  latencyMs: number | null;
  error: string | null;
  detail: string | null;
  tools: ToolRun[]; // the tools it called while it answered (its router's grant)
}

export interface Fallback {
  role: string;
  model: string;
  error: string;
  detail?: string;
}

/** One answer of a vote and the panelists who gave it (`_meta.decision.tally`). */
export interface TallyEntry {
  answer: string;
  votes: number;
  panelists: string[];
}

/** A panelist's place in a rank's Borda count (`_meta.decision.ranking`, best first). */
export interface RankEntry {
  panelist: string;
  points: number;
  reviews: number;
  score: number;
}

/** One reviewer's ranking of the others' answers (a `review` event; `_meta.decision.reviews`). */
export interface Review {
  reviewer: string;
  success: boolean;
  ranking: string[] | null; // best first; null when it abstained
  shown: string[] | null; // the order it read them in
  reason: string;
  error?: string;
}

/** One of best-of-n's two readings (a `verdict` event; `_meta.decision.verdicts`). */
export interface Verdict {
  order: "as_given" | "reversed";
  judge: string | null;
  pick: number | null;
  panelist: string | null;
  reason: string;
  error?: string;
}

/** How a debate decided (a `decision` event; `_meta.decision`): see docs/panel.md, "Decision rules". `none`: no one
 * chose (rule `analysis`, or every arbitrator failed and the labelled answers came back; `reason` says which). */
export interface Decision {
  rule: string;
  decidedBy: "arbitrator" | "majority" | "borda" | "judge" | "agreement" | "none";
  model?: string;
  winner?: string;
  reason?: string;
  arbitrator?: string;
  independent?: boolean;
  note?: string;
  answerRule?: string;
  answer?: string;
  tally?: TallyEntry[];
  unreadable?: string[];
  seed?: number;
  ranking?: RankEntry[];
  reviews?: Review[];
  judge?: string;
  verdicts?: Verdict[];
}

/** One contradiction of the map: a point the models take opposite stances on, each model's claim as its stance. */
export interface Contradiction {
  topic: string;
  stances: { model: string; stance: string }[];
}

/** The disagreement map of the panel's answers (an `analysis` event; `_meta.analysis`): docs/panel.md, "The
 * disagreement map". Reckoned by Parley from the answers' words, no model call. */
export interface Analysis {
  agreement: number; // 0..1, the mean of the pairs'
  pairs: { models: string[]; agreement: number }[];
  consensus: string[];
  contradictions: Contradiction[];
  partialCoverage: { point: string; models: string[]; missing: string[] }[];
  uniqueInsights: { model: string; insight: string }[];
  blindSpots: string[]; // the question's terms no answer mentions
  method: string;
}

/** Adaptive depth's path (a `depth` event; `_meta.adaptive`): docs/panel.md, "Adaptive depth". */
export interface Adaptive {
  path: "agreed" | "escalated";
  agreement: number; // of the first seats' answers
  threshold: number;
  firstSeats: string[];
  seats: number; // the whole panel's
  shadowAsked: boolean; // the whole panel was asked anyway, to compare (`shadow: true`)
  shadow?: { agreement: number; sameAnswer: boolean }; // the comparison, once the answer is in
}

/** A model that failed on the way (`_meta.status.failed`). */
export interface Failure {
  model: string;
  role: string;
  error: string;
  detail?: string;
}

/** What became of the request (`_meta.status`): `degraded` when every arbitrator failed and the labelled answers
 * came back instead (docs/panel.md, "When every arbitrator fails"). */
export interface RunStatus {
  outcome: "answered" | "degraded";
  reason: string | null;
  failed: Failure[];
}

/** A function call the answer makes, in OpenAI's shape (`choices[0].message.tool_calls`). */
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** A tool call as the view shows it: built from its `tool_call` pieces as they stream, then the completion's. */
export interface Call {
  index: number;
  id: string;
  name: string;
  arguments: string;
}

export interface PanelView {
  seats: Seat[];
  answering: { role: string; model: string } | null;
  fallbacks: Fallback[];
  decision: Decision | null; // the latest `decision` event, then `_meta.decision`
  analysis: Analysis | null; // the `analysis` event, then `_meta.analysis`
  adaptive: Adaptive | null; // the `depth` event, then `_meta.adaptive`
  outcome: RunStatus | null; // `_meta.status`, once done
  reviews: Review[]; // rank: each reviewer's ranking as it arrives
  verdicts: Verdict[]; // best-of-n: each reading as it arrives
  pieces: Piece[];
  calls: Call[]; // the tool calls the answer makes
  answer: string | null; // the final answer, once `done` brings the completion
  completion: Completion | null;
  status: "waiting" | "panel" | "deciding" | "answering" | "done" | "failed" | "cancelled";
  error: string | null;
}

export interface Completion {
  id: string;
  model: string;
  choices: { message: { content: string | null; tool_calls?: ToolCall[] }; finish_reason?: string }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number };
  _meta?: Record<string, unknown>;
}

export const emptyPanel = (): PanelView => ({
  seats: [],
  answering: null,
  fallbacks: [],
  decision: null,
  analysis: null,
  adaptive: null,
  outcome: null,
  reviews: [],
  verdicts: [],
  pieces: [],
  calls: [],
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
  cachedTokens: 0,
  reasoningTokens: 0,
  cost: null,
  latencyMs: null,
  error: null,
  detail: null,
  tools: [],
});

/** The seat whose tool call or result `data` is (`speaker.id` "panelist:<seat>"), or -1: the answer's own call. */
function panelistOf(data: Record<string, any>): number {
  const id = String(data.speaker?.id ?? "");
  return id.startsWith("panelist:") ? Number(id.slice("panelist:".length)) : -1;
}

/** Adaptive depth's report, from a `depth` event (`shadow`: whether it was asked) or `_meta.adaptive` (`shadow`: the
 * comparison, when it was asked). */
function adaptiveOf(data: Record<string, any>, before: Adaptive | null): Adaptive {
  const compared = data.shadow && typeof data.shadow === "object" ? data.shadow : undefined;
  return {
    path: data.path,
    agreement: Number(data.agreement ?? 0),
    threshold: Number(data.threshold ?? 0),
    firstSeats: data.firstSeats ?? [],
    seats: Number(data.seats ?? 0),
    shadowAsked: data.shadow === true || compared !== undefined || Boolean(before?.shadowAsked),
    shadow: compared,
  };
}

/** The seats adaptive depth never asked (it stopped after the first seats, and no shadow asks the rest) marked so. */
function withSkipped(seats: Seat[], adaptive: Adaptive): Seat[] {
  if (adaptive.path !== "agreed" || adaptive.shadowAsked) return seats;
  const asked = (s: Seat) => s.status !== "waiting" || adaptive.firstSeats.includes(s.model);
  return seats.map((s) => (asked(s) ? s : { ...s, status: "skipped" }));
}

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
        cachedTokens: data.cachedTokens ?? 0,
        reasoningTokens: data.reasoningTokens ?? 0,
        cost: data.cost ?? null,
        latencyMs: data.latencyMs ?? null,
        error: data.error ?? null,
        detail: data.detail ?? null,
        tools: data.toolCalls ? storedToolCalls(data.toolCalls) : seats[data.index].tools,
      };
      return { ...view, seats };
    }
    case "tool_result":
    case "tool_call": {
      const at = panelistOf(data);
      if (at < 0 && event === "tool_result") return view;
      if (at >= 0) {
        const seats = view.seats.slice();
        while (seats.length <= at) seats.push(seat(seats.length, String(data.speaker?.name ?? "")));
        seats[at] = { ...seats[at], tools: withToolEvent(seats[at].tools, event, data) };
        return { ...view, seats };
      }
      // The answer's call: its first piece names it; the others carry more of its JSON arguments.
      const calls = view.calls.slice();
      const index = calls.findIndex((c) => c.index === data.index);
      const piece = String(data.arguments ?? "");
      if (index < 0) calls.push({ index: data.index, id: data.id ?? "", name: data.name ?? "", arguments: piece });
      else calls[index] = { ...calls[index], arguments: calls[index].arguments + piece };
      return { ...view, status: "answering", calls };
    }
    case "answering":
      return { ...view, status: "answering", answering: { role: data.role, model: data.model } };
    case "fallback":
      return { ...view, fallbacks: [...view.fallbacks, data] };
    case "review":
      return { ...view, status: "deciding", reviews: [...view.reviews, data] };
    case "verdict":
      return { ...view, status: "deciding", verdicts: [...view.verdicts, data] };
    case "decision":
      return { ...view, decision: data };
    case "depth": {
      const adaptive = adaptiveOf(data, view.adaptive);
      return { ...view, adaptive, seats: withSkipped(view.seats, adaptive) };
    }
    case "analysis":
      return { ...view, analysis: data as Analysis };
    case "chunk":
      return { ...view, status: view.status === "panel" || view.status === "deciding" ? "answering" : view.status,
               pieces: [...view.pieces, { seq: id, text: String(data.content ?? "") }] };
    case "done": {
      const completion: Completion | null = data.completion ?? null;
      const toolCalls = completion?.choices?.[0]?.message?.tool_calls;
      const meta = completion?._meta ?? {};
      const adaptive = meta.adaptive ? adaptiveOf(meta.adaptive as Record<string, any>, view.adaptive) : view.adaptive;
      return {
        ...view,
        status: "done",
        seats: adaptive ? withSkipped(view.seats, adaptive) : view.seats,
        analysis: (meta.analysis as Analysis | undefined) ?? view.analysis,
        adaptive,
        outcome: (meta.status as RunStatus | undefined) ?? null,
        completion,
        answer: completion?.choices?.[0]?.message?.content ?? null,
        decision: (meta.decision as Decision | undefined) ?? view.decision,
        calls: toolCalls
          ? toolCalls.map((c, index) => ({ index, id: c.id, name: c.function.name, arguments: c.function.arguments }))
          : view.calls,
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
