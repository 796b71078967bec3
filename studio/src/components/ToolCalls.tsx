/** The tools a turn called, each with its arguments and result (folded: the call's one line shows first). */
import type { ToolCall } from "../streams/tools";
import { Badge } from "./ui";

function oneLine(text: string, max = 80): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

export function ToolCalls({ calls }: { calls: ToolCall[] }) {
  if (!calls.length) return null;
  return (
    <ul className="tool-calls" aria-label="Tool calls">
      {calls.map((call) => (
        <li key={call.id} className={`tool-call${call.isError ? " tool-error" : ""}`} data-tool={call.name}>
          <details>
            <summary>
              <code>{call.name}</code>({oneLine(call.arguments, 60)}){" "}
              {call.result === null ? <Badge tone="live">running…</Badge>
                : call.isError ? <Badge tone="bad">failed</Badge> : <span className="muted">→ {oneLine(call.result)}</span>}
            </summary>
            <dl>
              <dt>Arguments</dt>
              <dd><pre>{call.arguments || "{}"}</pre></dd>
              <dt>Result</dt>
              <dd><pre>{call.result ?? "(running)"}</pre></dd>
            </dl>
          </details>
        </li>
      ))}
    </ul>
  );
}
