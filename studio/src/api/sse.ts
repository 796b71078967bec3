/**
 * Server-Sent Events over fetch, so the key travels in the Authorization header and never in a URL
 * (the browser's EventSource can send no headers). `follow` reconnects a dropped stream with
 * Last-Event-ID and drops any event it has already seen, so no text is shown twice; a stream cut by a
 * storage failure is followed on, once storage is back, to the run's real end.
 */
import { createParser } from "eventsource-parser";

import { ApiError, authHeaders, errorMessage } from "./client";

/** One event: its sequence number (the SSE `id:`), name and JSON payload. */
export interface StreamEvent {
  id: number | null;
  event: string;
  // The wire's JSON: each reducer reads the fields of the events it knows.
  data: any;
}

export interface StreamRequest {
  url: string;
  method?: string;
  body?: unknown;
}

interface ReadOptions {
  signal: AbortSignal;
  lastEventId?: number | null;
  onOpen?: (response: Response) => void;
  onEvent: (event: StreamEvent) => void;
}

function parseData(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** Open one event stream and hand each event to `onEvent`; resolves when the server ends the body. */
export async function readStream(key: string, req: StreamRequest, options: ReadOptions): Promise<void> {
  const headers = authHeaders(key, { Accept: "text/event-stream" });
  if (options.lastEventId !== undefined && options.lastEventId !== null) {
    headers["Last-Event-ID"] = String(options.lastEventId);
  }
  let body: string | undefined;
  if (req.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(req.body);
  }
  const response = await fetch(req.url, { method: req.method ?? "GET", headers, body, signal: options.signal });
  if (!response.ok || !response.body) {
    const text = await response.text();
    throw new ApiError(response.status, errorMessage(parseData(text), response.status), parseData(text));
  }
  options.onOpen?.(response);
  const parser = createParser({
    onEvent(message) {
      const id = message.id !== undefined && message.id !== "" ? Number(message.id) : null;
      options.onEvent({ id: Number.isFinite(id) ? id : null, event: message.event ?? "message", data: parseData(message.data) });
    },
  });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    parser.feed(value);
  }
}

export interface FollowOptions {
  /** The request that opens the stream (a POST that starts a run, or a GET of its events). */
  start: StreamRequest;
  /** Where to reconnect after a drop, given the last event id seen; null when the stream cannot resume. */
  resume?: (lastEventId: number | null) => StreamRequest | null;
  /** Events after which the stream is complete. */
  terminal: ReadonlySet<string>;
  onOpen?: (response: Response) => void;
  onEvent: (event: StreamEvent) => void;
  onReconnect?: (attempt: number) => void;
  /** Storage went down (true) under the stream, or the stream reads on again (false). */
  onOutage?: (down: boolean) => void;
  signal: AbortSignal;
  /** Reconnections in a row after a dropped connection; a storage outage is waited out however long it lasts. */
  retries?: number;
}

export const TERMINAL_EVENTS: ReadonlySet<string> = new Set(["done", "error", "cancelled"]);

/** The `error` that ends a stream when Parley's database fails (docs/operations.md, "Storage failure"). It has no
 * id and is not the run's end: the run goes on once storage is back, and a listener resumes after its last id. */
export const STORAGE_UNAVAILABLE = "storage_unavailable";

export function isStorageOutage(event: StreamEvent): boolean {
  return event.event === "error" && event.id === null && event.data?.code === STORAGE_UNAVAILABLE;
}

function wait(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * Follow a stream to its terminal event, reconnecting with Last-Event-ID when the connection drops.
 * A refusal (an HTTP error status) is not a drop: it rejects at once. A storage outage is not the end
 * either: the `storage_unavailable` error is not passed on, and the stream is reconnected (the 503s that
 * answer meanwhile waited out) until the run's own terminal event arrives.
 */
export async function follow(key: string, options: FollowOptions): Promise<void> {
  const { signal, retries = 5 } = options;
  let lastId: number | null = null;
  let finished = false;
  let outage = false;
  let attempt = 0;
  let req: StreamRequest | null = options.start;
  let resuming = false;
  const storage = (down: boolean) => {
    if (outage === down) return;
    outage = down;
    options.onOutage?.(down);
  };
  while (req) {
    try {
      await readStream(key, req, {
        signal,
        lastEventId: resuming ? lastId : undefined,
        onOpen(response) {
          if (outage) attempt = 0; // storage answers again: the run's events can be read
          storage(false);
          options.onOpen?.(response);
        },
        onEvent(event) {
          if (isStorageOutage(event)) {
            storage(true);
            return;
          }
          if (event.id !== null) {
            if (lastId !== null && event.id <= lastId) return; // already shown before the drop
            lastId = event.id;
          }
          attempt = 0;
          storage(false);
          if (options.terminal.has(event.event)) finished = true;
          options.onEvent(event);
        },
      });
    } catch (error) {
      if (signal.aborted) return;
      // A 503 to a request that only reads the run (`database_unavailable`) says storage is still down: wait on.
      // One to a request that would start a run started nothing, and is final like any refusal.
      const reading = resuming || (req.method ?? "GET") === "GET";
      if (error instanceof ApiError && !(error.status === 503 && reading)) throw error;
      if (error instanceof ApiError) storage(true);
    }
    if (finished || signal.aborted) return;
    req = options.resume?.(lastId) ?? null;
    if (!req || (!outage && attempt >= retries)) break;
    attempt += 1;
    options.onReconnect?.(attempt);
    await wait(Math.min(250 * 2 ** attempt, 4000), signal);
    if (signal.aborted) return;
    resuming = true;
  }
  throw new Error(
    outage
      ? "Storage is unavailable and this stream cannot be resumed: the run goes on once storage is back (see History)"
      : "The connection dropped and could not be resumed",
  );
}
