/**
 * The tools a debater called during its turn (issue 20): built live from the `tool_call` and `tool_result` events
 * of any mode's stream, or read from a stored message's `toolCalls` (`metadata.toolCalls` of a round-table
 * transcript, a duel record's messages). Every view keeps them on the turn that made them.
 */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
  result: string | null; // null while the call runs
  isError: boolean;
}

/** A turn's calls after one `tool_call` or `tool_result` event (`data` as the stream sends it). */
export function withToolEvent(calls: ToolCall[], event: string, data: Record<string, unknown>): ToolCall[] {
  const id = String(data.id ?? "");
  if (event === "tool_call") {
    if (calls.some((c) => c.id === id)) return calls;
    return [...calls, { id, name: String(data.name ?? ""), arguments: String(data.arguments ?? ""), result: null,
      isError: false }];
  }
  if (event === "tool_result") {
    const known = calls.some((c) => c.id === id);
    const done = { result: String(data.content ?? ""), isError: Boolean(data.isError) };
    return known ? calls.map((c) => (c.id === id ? { ...c, ...done } : c))
      : [...calls, { id, name: String(data.name ?? ""), arguments: "", ...done }];
  }
  return calls;
}

/** The calls a stored message kept (`toolCalls`), or none. */
export function storedToolCalls(value: unknown): ToolCall[] {
  if (!Array.isArray(value)) return [];
  return value.map((c: Record<string, unknown>) => ({
    id: String(c.id ?? ""),
    name: String(c.name ?? ""),
    arguments: String(c.arguments ?? ""),
    result: typeof c.result === "string" ? c.result : null,
    isError: Boolean(c.isError),
  }));
}
