/** Follow one stream at a time from a view: start, stop, and whether it is running, reconnecting or failed. */
import { useCallback, useEffect, useRef, useState } from "react";

import { follow, type FollowOptions } from "../api/sse";

export interface FollowState {
  running: boolean;
  error: unknown;
  /** Reconnections since the last event (0: reading). */
  reconnects: number;
  /** Storage is down under the run: the page waits for it and reads on (docs/operations.md). */
  outage: boolean;
}

export function useFollow() {
  const controller = useRef<AbortController | null>(null);
  const [running, setRunning] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [reconnects, setReconnects] = useState(0);
  const [outage, setOutage] = useState(false);

  const start = useCallback(async (key: string, options: Omit<FollowOptions, "signal">) => {
    controller.current?.abort();
    const own = new AbortController();
    controller.current = own;
    setRunning(true);
    setError(null);
    setReconnects(0);
    setOutage(false);
    let reconnecting = false; // so the events of a steady stream set no state
    try {
      await follow(key, {
        ...options,
        signal: own.signal,
        onReconnect(attempt) {
          reconnecting = true;
          if (controller.current === own) setReconnects(attempt);
        },
        onOutage(down) {
          if (controller.current === own) setOutage(down);
        },
        onEvent(event) {
          if (reconnecting && controller.current === own) setReconnects(0);
          reconnecting = false;
          options.onEvent(event);
        },
      });
    } catch (err) {
      if (!own.signal.aborted) setError(err);
    } finally {
      if (controller.current === own) {
        setRunning(false);
        setOutage(false);
      }
    }
  }, []);

  const stop = useCallback(() => {
    controller.current?.abort();
    controller.current = null;
    setRunning(false);
    setOutage(false);
  }, []);

  useEffect(() => () => controller.current?.abort(), []);

  return { start, stop, running, error, reconnects, outage };
}
