/**
 * Apply a run's events to a view through a pure reducer, at most once per animation frame: at 100
 * chunks a second React renders ~60 times, not 100, and each render sees every event so far.
 */
import { useCallback, useEffect, useRef, useState } from "react";

import type { StreamEvent } from "../api/sse";

export type Reducer<S> = (state: S, event: StreamEvent) => S;

export function useStreamReducer<S>(reducer: Reducer<S>, initial: () => S) {
  const [state, setState] = useState<S>(initial);
  const pending = useRef<StreamEvent[]>([]);
  const frame = useRef<number | null>(null);

  const flush = useCallback(() => {
    frame.current = null;
    const batch = pending.current;
    pending.current = [];
    if (batch.length) setState((current) => batch.reduce(reducer, current));
  }, [reducer]);

  const push = useCallback(
    (event: StreamEvent) => {
      pending.current.push(event);
      if (frame.current === null) frame.current = requestAnimationFrame(flush);
    },
    [flush],
  );

  const reset = useCallback(
    (next?: S) => {
      pending.current = [];
      if (frame.current !== null) cancelAnimationFrame(frame.current);
      frame.current = null;
      setState(next ?? initial());
    },
    // `initial` builds a fresh state and means the same on every render, so it is not a dependency.
    [],
  );

  useEffect(
    () => () => {
      if (frame.current !== null) cancelAnimationFrame(frame.current);
    },
    [],
  );

  return [state, push, reset] as const;
}

/** A piece of streamed text and the event that carried it (so a `retract` can void it). */
export interface Piece {
  seq: number | null;
  text: string;
}

/** The event ids a `retract {seqs}` voids. */
export function retracted(event: StreamEvent): Set<number> {
  return new Set<number>(Array.isArray(event.data?.seqs) ? event.data.seqs : []);
}

export function withoutPieces(pieces: readonly Piece[], seqs: Set<number>): Piece[] {
  return pieces.filter((p) => p.seq === null || !seqs.has(p.seq));
}

/** Update the last item matching `test` (streams append to the newest turn). */
export function updateLast<T>(items: readonly T[], test: (item: T) => boolean, update: (item: T) => T): T[] | null {
  for (let i = items.length - 1; i >= 0; i -= 1) {
    if (test(items[i])) {
      const copy = items.slice();
      copy[i] = update(items[i]);
      return copy;
    }
  }
  return null;
}
