/**
 * Server-Sent Events over fetch, so the key travels in the Authorization header and never in a URL
 * (the browser's EventSource can send no headers). `follow` reconnects a dropped stream with
 * Last-Event-ID and drops any event it has already seen, so no text is shown twice.
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
  signal: AbortSignal;
  retries?: number;
}

export const TERMINAL_EVENTS: ReadonlySet<string> = new Set(["done", "error", "cancelled"]);

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
 * A refusal (an HTTP error status) is not a drop: it rejects at once.
 */
export async function follow(key: string, options: FollowOptions): Promise<void> {
  const { signal, retries = 5 } = options;
  let lastId: number | null = null;
  let finished = false;
  let attempt = 0;
  let req: StreamRequest | null = options.start;
  let resuming = false;
  while (req) {
    try {
      await readStream(key, req, {
        signal,
        lastEventId: resuming ? lastId : undefined,
        onOpen: options.onOpen,
        onEvent(event) {
          if (event.id !== null) {
            if (lastId !== null && event.id <= lastId) return; // already shown before the drop
            lastId = event.id;
          }
          attempt = 0;
          if (options.terminal.has(event.event)) finished = true;
          options.onEvent(event);
        },
      });
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError) throw error;
    }
    if (finished || signal.aborted) return;
    req = options.resume?.(lastId) ?? null;
    if (!req || attempt >= retries) break;
    attempt += 1;
    options.onReconnect?.(attempt);
    await wait(Math.min(250 * 2 ** attempt, 4000), signal);
    if (signal.aborted) return;
    resuming = true;
  }
  throw new Error("The connection dropped and could not be resumed");
}
