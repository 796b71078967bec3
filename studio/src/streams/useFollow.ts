/** Follow one stream at a time from a view: start, stop, and whether it is running or failed. */
import { useCallback, useEffect, useRef, useState } from "react";

import { follow, type FollowOptions } from "../api/sse";

export function useFollow() {
  const controller = useRef<AbortController | null>(null);
  const [running, setRunning] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [reconnects, setReconnects] = useState(0);

  const start = useCallback(async (key: string, options: Omit<FollowOptions, "signal">) => {
    controller.current?.abort();
    const own = new AbortController();
    controller.current = own;
    setRunning(true);
    setError(null);
    setReconnects(0);
    try {
      await follow(key, { ...options, signal: own.signal, onReconnect: setReconnects });
    } catch (err) {
      if (!own.signal.aborted) setError(err);
    } finally {
      if (controller.current === own) setRunning(false);
    }
  }, []);

  const stop = useCallback(() => {
    controller.current?.abort();
    controller.current = null;
    setRunning(false);
  }, []);

  useEffect(() => () => controller.current?.abort(), []);

  return { start, stop, running, error, reconnects };
}
