/** Calls to Parley's HTTP API with the signed-in key, and the errors they raise. */

/** A refused or failed request: its HTTP status and the server's own message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly body: unknown = null,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

/** The human message of an error body, whichever of Parley's three shapes it has. */
export function errorMessage(body: unknown, status: number): string {
  if (body && typeof body === "object") {
    const error = (body as { error?: unknown }).error;
    if (typeof error === "string") return error;
    if (error && typeof error === "object" && typeof (error as { message?: unknown }).message === "string") {
      return (error as { message: string }).message;
    }
  }
  return `The server answered HTTP ${status}`;
}

export interface RequestOptions {
  method?: string;
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export function authHeaders(key: string, extra: Record<string, string> = {}): Record<string, string> {
  return { Authorization: `Bearer ${key}`, ...extra };
}

/** Send a JSON request; resolve to the parsed answer, or reject with an ApiError. */
export async function request<T>(key: string, path: string, options: RequestOptions = {}): Promise<T> {
  const headers = authHeaders(key, options.headers);
  let body: string | undefined;
  if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  const response = await fetch(path, { method: options.method ?? "GET", headers, body, signal: options.signal });
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  if (!response.ok) throw new ApiError(response.status, errorMessage(parsed, response.status), parsed);
  return parsed as T;
}

/** A request function bound to one key (what `useApi()` hands to views). */
export type Api = <T>(path: string, options?: RequestOptions) => Promise<T>;

export function bindApi(key: string): Api {
  return <T,>(path: string, options?: RequestOptions) => request<T>(key, path, options);
}

/** Text for an error caught anywhere in the UI. */
export function describeError(error: unknown): string {
  if (error instanceof ApiError) return `${error.message} (HTTP ${error.status})`;
  if (error instanceof Error) return error.message;
  return String(error);
}
