/**
 * A round-table exchange (one question put to the table) as the viewer shows it: built live from the
 * message stream's events (`round_start chunk tool_call tool_result message convergence synthesis done`, and the
 * steering ones, `human waiting resumed stopping`: docs/steering.md), or from a stored conversation
 * (`GET /v1/conversations/{id}`). Both give the same shape, so one view draws either.
 */
import type { StreamEvent } from "../api/sse";
import { storedToolCalls, withToolEvent, type ToolCall } from "./tools";
import { retracted, withoutPieces, type Piece } from "./useStream";

/** Parley's default convergence threshold; a live stream states the one in force. */
export const DEFAULT_THRESHOLD = 0.85;

export interface RtTurn {
  agentId: string;
  agentName: string;
  agentRole: string | null;
  isDevilsAdvocate: boolean;
  pieces: Piece[];
  content: string | null;
  stance: string | null;
  confidence: number | null;
  keyPoint: string | null;
  toolCalls: ToolCall[];
}

export interface RtRound {
  roundNumber: number;
  phase: string;
  startSeq: number | null;
  turns: RtTurn[];
}

export interface RtPoint {
  roundNumber: number;
  score: number;
}

export interface RtSynthesis {
  summary?: string;
  debateEvolution?: string;
  devilsAdvocateMainAttack?: string;
  agentInsights?: { name: string; role?: string; keyPoint?: string; stance?: string; shifted?: boolean }[];
  consensus?: string[];
  riskPoints?: string[];
  recommendedAction?: string;
  conditions?: string[];
  confidenceLevel?: string;
  urgency?: string;
  roundCount?: number;
  biasNotes?: string | string[];
}

/** A message the person who asked sent during the debate: every turn of `roundNumber` and after sees it. */
export interface Guidance {
  name: string;
  content: string;
  roundNumber: number;
}

export interface Exchange {
  question: string;
  rounds: RtRound[];
  convergence: RtPoint[];
  threshold: number;
  synthesis: RtSynthesis | null;
  status: "running" | "waiting" | "done" | "failed";
  error: string | null;
  guidance: Guidance[];
  /** Why it went to its synthesis early: unanimous, user, budget. */
  stoppedBy: string | null;
  /** The round after which it waits for the person, while it waits. */
  waitingAfter: number | null;
}

export const emptyExchange = (question = ""): Exchange => ({
  question,
  rounds: [],
  convergence: [],
  threshold: DEFAULT_THRESHOLD,
  synthesis: null,
  status: "running",
  error: null,
  guidance: [],
  stoppedBy: null,
  waitingAfter: null,
});

export function turnText(turn: RtTurn): string {
  return turn.content ?? turn.pieces.map((p) => p.text).join("");
}

const blankTurn = (agentId: string, agentName: string, isDevilsAdvocate: boolean): RtTurn => ({
  agentId,
  agentName,
  agentRole: null,
  isDevilsAdvocate,
  pieces: [],
  content: null,
  stance: null,
  confidence: null,
  keyPoint: null,
  toolCalls: [],
});

function updateTurn(view: Exchange, roundNumber: number, agentId: string, agentName: string,
                    update: (turn: RtTurn) => RtTurn): Exchange {
  const rounds = view.rounds.map((round) => {
    if (round.roundNumber !== roundNumber) return round;
    const known = round.turns.some((t) => t.agentId === agentId);
    const turns = known ? round.turns : [...round.turns, blankTurn(agentId, agentName, false)];
    return { ...round, turns: turns.map((t) => (t.agentId === agentId ? update(t) : t)) };
  });
  return { ...view, rounds };
}

export function exchangeReducer(view: Exchange, { event, data, id }: StreamEvent): Exchange {
  switch (event) {
    case "round_start": {
      const round: RtRound = {
        roundNumber: data.roundNumber,
        phase: data.phase,
        startSeq: id,
        turns: (data.agents ?? []).map((a: { agentId: string; agentName: string; isDevilsAdvocate?: boolean }) =>
          blankTurn(a.agentId, a.agentName, Boolean(a.isDevilsAdvocate)),
        ),
      };
      return { ...view, rounds: [...view.rounds.filter((r) => r.roundNumber !== round.roundNumber), round] };
    }
    case "chunk":
      return updateTurn(view, data.roundNumber, data.agentId, data.agentName, (t) => ({
        ...t,
        pieces: [...t.pieces, { seq: id, text: String(data.content ?? "") }],
      }));
    case "message":
      return updateTurn(view, data.roundNumber, data.agentId, data.agentName, (t) => ({
        ...t,
        agentRole: data.agentRole ?? t.agentRole,
        isDevilsAdvocate: Boolean(data.isDevilsAdvocate),
        content: data.content,
        stance: data.stance ?? null,
        confidence: typeof data.confidence === "number" ? data.confidence : null,
        keyPoint: data.keyPoint ?? null,
        toolCalls: data.toolCalls ? storedToolCalls(data.toolCalls) : t.toolCalls,
      }));
    case "tool_call":
    case "tool_result":
      return updateTurn(view, data.roundNumber, data.agentId, data.agentName, (t) => ({
        ...t,
        toolCalls: withToolEvent(t.toolCalls, event, data),
      }));
    case "convergence":
      return {
        ...view,
        threshold: typeof data.threshold === "number" ? data.threshold : view.threshold,
        convergence: [...view.convergence.filter((p) => p.roundNumber !== data.roundNumber),
          { roundNumber: data.roundNumber, score: data.score }],
      };
    case "human":
      return { ...view, guidance: [...view.guidance, { name: data.name, content: data.content, roundNumber: data.roundNumber }] };
    case "waiting":
      return { ...view, status: "waiting", waitingAfter: data.position ?? null };
    case "resumed":
      return { ...view, status: view.status === "waiting" ? "running" : view.status, waitingAfter: null };
    case "stopping":
      return { ...view, stoppedBy: data.by ?? view.stoppedBy };
    case "synthesis":
      return { ...view, synthesis: data.synthesis ?? view.synthesis };
    case "done":
      return { ...view, status: "done", synthesis: data.synthesis ?? view.synthesis, stoppedBy: data.stoppedBy ?? view.stoppedBy };
    case "error":
    case "cancelled":
      return { ...view, status: "failed", error: data.error ?? data.message ?? "The debate failed" };
    case "retract": {
      const seqs = retracted({ event, data, id });
      const rounds = view.rounds
        .filter((r) => r.startSeq === null || !seqs.has(r.startSeq))
        .map((r) => ({ ...r, turns: r.turns.map((t) => ({ ...t, pieces: withoutPieces(t.pieces, seqs) })) }));
      return { ...view, rounds };
    }
    default:
      return view;
  }
}

// --- stored conversations -------------------------------------------------------------------

export interface StoredMessage {
  id: string;
  senderType: "user" | "agent" | "devils-advocate" | "synthesizer";
  content: string;
  agentId?: string;
  agentName?: string;
  agentRole?: string;
  metadata?: Record<string, unknown> & { roundNumber?: number; phase?: string; stance?: string; confidence?: number };
  createdAt: string;
}

export interface StoredRound {
  id: string;
  exchange: number;
  roundNumber: number;
  convergenceScore: number | null;
}

export interface Conversation {
  id: string;
  title: string;
  createdAt: string;
  messages: StoredMessage[];
  debates: StoredRound[];
}

/**
 * Split a stored conversation into its exchanges: each user message opens one (exchanges are numbered
 * from 1 in `debates`). Only debate rounds (round ≥ 1, with a score) are plotted; round 0 is the
 * table's initial positions.
 */
export function exchangesOf(conversation: Conversation): Exchange[] {
  const exchanges: Exchange[] = [];
  for (const m of conversation.messages) {
    if (m.senderType === "user" && m.metadata?.inputId) {  // the person's message during the debate
      exchanges[exchanges.length - 1]?.guidance.push({
        name: String(m.metadata.user ?? "you"), content: m.content, roundNumber: Number(m.metadata.roundNumber ?? 0),
      });
      continue;
    }
    if (m.senderType === "user") {
      exchanges.push({ ...emptyExchange(m.content), status: "failed", error: "This question has no synthesis." });
      continue;
    }
    const current = exchanges[exchanges.length - 1];
    if (!current) continue;
    if (m.senderType === "synthesizer") {
      current.synthesis = (m.metadata ?? {}) as RtSynthesis;
      current.stoppedBy = typeof m.metadata?.stoppedBy === "string" ? m.metadata.stoppedBy : null;
      current.status = "done";
      current.error = null;
      continue;
    }
    const meta = m.metadata ?? {};
    const roundNumber = Number(meta.roundNumber ?? 0);
    let round = current.rounds.find((r) => r.roundNumber === roundNumber);
    if (!round) {
      round = { roundNumber, phase: String(meta.phase ?? (roundNumber ? "debate" : "initial")), startSeq: null, turns: [] };
      current.rounds.push(round);
    }
    round.turns.push({
      ...blankTurn(m.agentId ?? m.id, m.agentName ?? "Agent", m.senderType === "devils-advocate"),
      agentRole: m.agentRole ?? null,
      content: m.content,
      stance: typeof meta.stance === "string" ? meta.stance : null,
      confidence: typeof meta.confidence === "number" ? meta.confidence : null,
      keyPoint: typeof meta.keyPoint === "string" ? meta.keyPoint : null,
      toolCalls: storedToolCalls(meta.toolCalls),
    });
  }
  for (const d of conversation.debates) {
    const exchange = exchanges[d.exchange - 1];
    if (exchange && d.roundNumber >= 1 && typeof d.convergenceScore === "number") {
      exchange.convergence.push({ roundNumber: d.roundNumber, score: d.convergenceScore });
    }
  }
  for (const exchange of exchanges) {
    exchange.rounds.sort((a, b) => a.roundNumber - b.roundNumber);
    exchange.convergence.sort((a, b) => a.roundNumber - b.roundNumber);
    // Stored turns are in the order they finished; show every round in one seating order, the devil's
    // advocate last, as the live stream does.
    const seats = new Map<string, number>();
    for (const turn of exchange.rounds.flatMap((r) => r.turns)) if (!seats.has(turn.agentId)) seats.set(turn.agentId, seats.size);
    const seat = (t: RtTurn) => (t.isDevilsAdvocate ? 1000 : 0) + (seats.get(t.agentId) ?? 0);
    for (const round of exchange.rounds) round.turns.sort((a, b) => seat(a) - seat(b));
  }
  return exchanges;
}
