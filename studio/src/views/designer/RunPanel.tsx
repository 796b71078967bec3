/** Run the workflow: an input form built from its declared state, and the run's log as it happens. */
import { useEffect, useState } from "react";

import { ToolCalls } from "../../components/ToolCalls";
import { Badge, count, StatusLine } from "../../components/ui";
import { stepText, type WorkflowRunView } from "../../streams/workflow";
import { stateOf, writtenKeys, type Json, type WfStateKey, type WorkflowDoc } from "./doc";

/** The keys a run is expected to give: required ones, and those no node writes. */
function inputKeys(doc: WorkflowDoc): [string, WfStateKey][] {
  const written = writtenKeys(doc);
  return Object.entries(stateOf(doc)).filter(([key, spec]) => spec.required || !written.has(key));
}

function initialText(value: Json, type: string | undefined): string {
  if (value === undefined) return "";
  if (type === "string" && typeof value === "string") return value;
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** A form value as the key's declared type; undefined when left empty (the default applies). */
function typed(text: string, type: string | undefined): Json {
  if (text.trim() === "") return undefined;
  switch (type) {
    case "string":
      return text;
    case "number":
    case "integer":
      return Number(text);
    case "boolean":
      return text === "true";
    case "object":
    case "array":
      return JSON.parse(text);
    default:
      try {
        return JSON.parse(text);
      } catch {
        return text;
      }
  }
}

export function RunPanel({ doc, run, running, onRun, onStop }: {
  doc: WorkflowDoc;
  run: WorkflowRunView;
  running: boolean;
  onRun: (input: Record<string, Json>) => void;
  onStop: () => void;
}) {
  const keys = inputKeys(doc);
  const sample = (doc.sampleInput ?? {}) as Record<string, Json>;
  const [values, setValues] = useState<Record<string, string>>({});
  const [problem, setProblem] = useState<string | null>(null);
  const signature = keys.map(([k, s]) => `${k}:${s.type}`).join(",") + JSON.stringify(sample);

  useEffect(() => {
    setValues(Object.fromEntries(keys.map(([key, spec]) => [key, initialText(sample[key], spec.type)])));
    // Refilled only when the declared inputs or the sample change, not on every edit elsewhere.
  }, [signature]);

  function submit(event: React.FormEvent) {
    event.preventDefault();
    const input: Record<string, Json> = {};
    for (const [key, spec] of keys) {
      try {
        const value = typed(values[key] ?? "", spec.type);
        if (value !== undefined) input[key] = value;
      } catch {
        setProblem(`${key}: not valid JSON for a ${spec.type}`);
        return;
      }
    }
    setProblem(null);
    onRun(input);
  }

  return (
    <section aria-labelledby="run-title" className="inspector">
      <h3 id="run-title">Run</h3>
      <form onSubmit={submit} aria-label="Run input">
        {keys.length === 0 && <p className="muted">This workflow declares no input keys.</p>}
        {keys.map(([key, spec]) => (
          <div className="field" key={key}>
            <label htmlFor={`run-${key}`}>
              {key} <span className="muted">({spec.type ?? "any"}{spec.required ? ", required" : ""})</span>
            </label>
            {spec.type === "boolean" ? (
              <select id={`run-${key}`} value={values[key] ?? ""} onChange={(e) => setValues({ ...values, [key]: e.target.value })}>
                <option value="">default</option>
                <option value="true">true</option>
                <option value="false">false</option>
              </select>
            ) : spec.type === "number" || spec.type === "integer" ? (
              <input id={`run-${key}`} type="number" value={values[key] ?? ""} onChange={(e) => setValues({ ...values, [key]: e.target.value })} />
            ) : (
              <textarea id={`run-${key}`} rows={2} className={spec.type === "string" ? "" : "mono"} value={values[key] ?? ""}
                        placeholder={spec.default !== undefined ? `default: ${JSON.stringify(spec.default)}` : undefined}
                        onChange={(e) => setValues({ ...values, [key]: e.target.value })} />
            )}
            {spec.description && <p className="hint">{spec.description}</p>}
          </div>
        ))}
        <div className="actions">
          <button type="submit" disabled={running}>
            {running ? "Running…" : "Run workflow"}
          </button>
          {running && (
            <button type="button" className="quiet" onClick={onStop}>
              Stop
            </button>
          )}
        </div>
        {problem && (
          <p role="alert" className="error">
            {problem}
          </p>
        )}
      </form>
      <RunLog run={run} />
    </section>
  );
}

function runStatus(run: WorkflowRunView): string {
  const current = run.steps.filter((s) => s.status === "running").map((s) => s.node);
  switch (run.status) {
    case "waiting":
      return "Not run yet.";
    case "running":
      return current.length ? `Running ${current.join(", ")}…` : "Running…";
    case "done":
      return `Done: ${count(run.steps.length, "node run")}${run.usage?.totalTokens ? `, ${count(run.usage.totalTokens, "token")}` : ""}.`;
    case "cancelled":
      return "Cancelled.";
    default:
      return `Failed${run.error?.node ? ` at ${run.error.node}` : ""}: ${run.error?.message}`;
  }
}

/** Each node run in order, with its streamed tokens and output, then the final state. */
export function RunLog({ run }: { run: WorkflowRunView }) {
  if (run.status === "waiting" && run.steps.length === 0) return null;
  return (
    <div className="run-log">
      <StatusLine>{runStatus(run)}</StatusLine>
      <ol aria-label="Run log" className="steps">
        {run.steps.map((step, i) => {
          const text = stepText(step);
          return (
            <li key={i} data-node={step.node} data-status={step.status}>
              <p>
                <strong>{step.node}</strong> <span className="muted">{step.type}</span>{" "}
                <Badge tone={{ done: "good", failed: "bad", cancelled: "warn", running: "live" }[step.status]}>{step.status}</Badge>
                {step.keys.length > 0 && <span className="muted"> → {step.keys.join(", ")}</span>}
              </p>
              <ToolCalls calls={step.toolCalls} />
              {text && step.status === "running" && <p className="node-tokens">{text}</p>}
              {step.output !== undefined && (
                <details>
                  <summary>Output</summary>
                  <pre>{typeof step.output === "string" ? step.output : JSON.stringify(step.output, null, 2)}</pre>
                </details>
              )}
            </li>
          );
        })}
      </ol>
      {run.error && (
        <p role="alert" className="error">
          {run.error.message}
        </p>
      )}
      {run.state && (
        <details open>
          <summary>Final state</summary>
          <pre>{JSON.stringify(run.state, null, 2)}</pre>
        </details>
      )}
    </div>
  );
}
