/** Edit the selected node (every field of its type) or the selected edge. */
import { useEffect, useState } from "react";

import {
  edgesOf,
  getIn,
  nodeIndex,
  OPS,
  renameNode,
  setIn,
  setNodeField,
  stateOf,
  targets,
  type Json,
  type Path,
  type WorkflowDoc,
} from "./doc";
import { JsonField, ListField, NumberField, SelectField, TextField, TriStateField } from "./fields";
import type { Issue } from "./graph";

type Kind = "text" | "textarea" | "number" | "integer" | "list" | "json" | "tristate" | "select";

interface FieldSpec {
  path: Path;
  label: string;
  kind: Kind;
  help?: string;
  options?: readonly string[];
  /** Shown only when this holds for the node (transform fields depend on `op`). */
  when?: (node: Json) => boolean;
}

const op = (name: string) => (node: Json) => node?.config?.op === name;
const MODEL_HELP = "provider:model, e.g. openai:gpt-5-mini; the run's default when empty.";
const TEMPLATE_HELP = "Text with {key} placeholders over state keys.";

/** Each node type's fields, as the workflow schema defines them. */
const FIELDS: Record<string, FieldSpec[]> = {
  llm: [
    { path: ["inputs", "prompt"], label: "Prompt", kind: "textarea", help: TEMPLATE_HELP },
    { path: ["inputs", "system"], label: "System message", kind: "textarea", help: TEMPLATE_HELP },
    { path: ["config", "model"], label: "Model", kind: "text", help: MODEL_HELP },
    { path: ["config", "temperature"], label: "Temperature", kind: "number" },
    { path: ["config", "max_tokens"], label: "Max tokens", kind: "integer" },
    { path: ["config", "output_schema"], label: "Output schema", kind: "json", help: "A JSON Schema object: the answer is then that object." },
  ],
  transform: [
    { path: ["config", "op"], label: "Operation", kind: "select", options: ["pick", "join", "format"] },
    { path: ["config", "key"], label: "Key to pick", kind: "text", when: op("pick"), help: "A state key or dotted path." },
    { path: ["config", "keys"], label: "Keys to join", kind: "list", when: op("join") },
    { path: ["config", "field"], label: "Field of each item", kind: "text", when: op("join") },
    { path: ["config", "separator"], label: "Separator", kind: "text", when: op("join") },
    { path: ["inputs", "template"], label: "Template", kind: "textarea", when: op("format"), help: TEMPLATE_HELP },
  ],
  condition: [{ path: ["config", "key"], label: "Route on key", kind: "text", help: "A state key or dotted path." }],
  debate: [
    { path: ["config", "system_prompt"], label: "System Prompt", kind: "textarea", help: "Sent to every panelist." },
    { path: ["config", "arbitrator_prompt"], label: "Arbitrator Prompt", kind: "textarea", help: "Instructions for the arbitrator." },
    { path: ["inputs", "input"], label: "Input", kind: "text", help: "What the panel is asked; {input} when empty." },
    { path: ["config", "models"], label: "Panelist models", kind: "list", help: "The router/debate preset's when empty." },
    { path: ["config", "arbitrators"], label: "Arbitrators", kind: "list", help: "In order of preference." },
    { path: ["config", "panel_size"], label: "Panel size", kind: "integer" },
    { path: ["config", "allow_same_family"], label: "Allow same family", kind: "tristate" },
  ],
  panel: [
    { path: ["config", "system_prompt"], label: "System Prompt", kind: "textarea", help: "Sent to every panelist." },
    { path: ["inputs", "input"], label: "Input", kind: "text", help: "What the panel is asked; {input} when empty." },
    { path: ["config", "models"], label: "Panelist models", kind: "list" },
    { path: ["config", "panel_size"], label: "Panel size", kind: "integer" },
    { path: ["config", "allow_same_family"], label: "Allow same family", kind: "tristate" },
  ],
  duel: [
    { path: ["inputs", "topic"], label: "Topic", kind: "text", help: "{topic} when empty." },
    { path: ["inputs", "user_profile"], label: "Persona from state", kind: "text", help: "A placeholder for an object key, e.g. {profile}." },
    { path: ["inputs", "rounds"], label: "Rounds from state", kind: "text", help: "A placeholder for an integer key, e.g. {rounds}." },
    { path: ["config", "rounds"], label: "Rounds", kind: "integer" },
    { path: ["config", "model"], label: "Model", kind: "text", help: MODEL_HELP },
    { path: ["config", "user_profile"], label: "Persona", kind: "json", help: "{\"name\": …, \"bio\": …} when not taken from state." },
    { path: ["config", "options"], label: "Options", kind: "json", help: "Fields of the duel's run context." },
  ],
  roundtable: [
    { path: ["inputs", "question"], label: "Question", kind: "text", help: "{question} when empty." },
    { path: ["inputs", "topic"], label: "Topic", kind: "text" },
    { path: ["config", "agents"], label: "Agents", kind: "json", help: "\"workspace\" seats the workspace's agents; or a list of {name, role, persona, model}." },
    { path: ["config", "model"], label: "Model", kind: "text", help: MODEL_HELP },
    { path: ["config", "options"], label: "Options", kind: "json", help: "Fields of the round table's run context." },
  ],
  select_opponent: [
    { path: ["inputs", "topic"], label: "Topic", kind: "text", help: "{topic} when empty." },
    { path: ["inputs", "user_profile"], label: "User from state", kind: "text", help: "A placeholder for an object key, e.g. {profile}." },
    { path: ["config", "user_profile"], label: "User", kind: "json", help: "{\"name\": …, \"bio\": …} when not taken from state." },
    { path: ["config", "model"], label: "Model", kind: "text", help: MODEL_HELP },
    { path: ["config", "temperature"], label: "Temperature", kind: "number" },
  ],
  synthesize: [
    { path: ["inputs", "prompt"], label: "Prompt", kind: "textarea", help: TEMPLATE_HELP },
    { path: ["inputs", "system"], label: "System message", kind: "textarea", help: TEMPLATE_HELP },
    { path: ["config", "output_schema"], label: "Output schema", kind: "json", help: "A JSON Schema object: the synthesis's shape." },
    { path: ["config", "fallback"], label: "Fallback", kind: "json", help: "Written when the answer cannot be read; the node fails when empty." },
    { path: ["config", "model"], label: "Model", kind: "text", help: MODEL_HELP },
    { path: ["config", "temperature"], label: "Temperature", kind: "number" },
  ],
  score_convergence: [
    { path: ["inputs", "transcript"], label: "Transcript", kind: "text", help: "A placeholder for a list of messages, e.g. {outcome.transcript}." },
    { path: ["inputs", "round"], label: "Round from state", kind: "text", help: "A placeholder for an integer; the transcript's last round when empty." },
    { path: ["config", "threshold"], label: "Threshold", kind: "number", help: "The score (0–1) at which the table counts as converged." },
  ],
  fan_out: [
    { path: ["inputs", "prompt"], label: "Prompt", kind: "textarea", help: TEMPLATE_HELP },
    { path: ["inputs", "system"], label: "System message", kind: "textarea", help: TEMPLATE_HELP },
    { path: ["inputs", "previous"], label: "Revise answers from", kind: "text", help: "A placeholder for an earlier fan_out's list, e.g. {first}: each branch revises its answer after reading the others'." },
    { path: ["config", "branches"], label: "Branches", kind: "integer", help: "Parallel calls; one per model when empty." },
    { path: ["config", "models"], label: "Models", kind: "list", help: "Dealt to the branches in turn; the node's model when empty." },
    { path: ["config", "model"], label: "Model", kind: "text", help: MODEL_HELP },
    { path: ["config", "temperature"], label: "Temperature", kind: "number" },
    { path: ["config", "max_tokens"], label: "Max tokens", kind: "integer" },
    { path: ["config", "timeout"], label: "Branch timeout (s)", kind: "number", help: "Wall-clock seconds of one branch's attempt." },
    { path: ["config", "min_successes"], label: "Minimum answers", kind: "integer", help: "When set, a failed branch is recorded and the others go on; every branch must answer when empty." },
    { path: ["config", "revise_prompt"], label: "Revision prompt", kind: "textarea", help: "With {answers} and {question}; the multi-agent debate's when empty." },
  ],
  arbitrate: [
    { path: ["inputs", "answers"], label: "Answers", kind: "text", help: "A placeholder for a list of answers, e.g. {answers}." },
    { path: ["inputs", "question"], label: "Question", kind: "text", help: "{question} when empty." },
    { path: ["inputs", "system"], label: "Caller instructions", kind: "textarea", help: TEMPLATE_HELP },
    { path: ["config", "arbitrators"], label: "Arbitrators", kind: "list", help: "Asked in order until one answers; the run's model when empty." },
    { path: ["config", "prompt"], label: "Arbitrator Prompt", kind: "textarea", help: "Instructions replacing the arbitrator's own." },
    { path: ["config", "temperature"], label: "Temperature", kind: "number" },
    { path: ["config", "max_tokens"], label: "Max tokens", kind: "integer" },
    { path: ["config", "timeout"], label: "Timeout (s)", kind: "number", help: "Seconds one candidate may take." },
  ],
  judge: [
    { path: ["inputs", "topic"], label: "Topic", kind: "text", help: "{topic} when empty." },
    { path: ["inputs", "messages"], label: "Transcript", kind: "text", help: "A placeholder for turns [{role: user|opponent, content}], e.g. {outcome.messages}." },
    { path: ["inputs", "user_profile"], label: "User side", kind: "text", help: "A name, or a placeholder for a profile." },
    { path: ["inputs", "opponent_profile"], label: "Opponent side", kind: "text", help: "A name, or a placeholder for a profile." },
    { path: ["config", "model"], label: "Model", kind: "text", help: MODEL_HELP },
    { path: ["config", "temperature"], label: "Temperature", kind: "number" },
    { path: ["config", "conclusion_max_chars"], label: "Conclusion length", kind: "integer" },
  ],
  vote: [
    { path: ["inputs", "answers"], label: "Answers", kind: "text", help: "A placeholder for a list of answers, e.g. {answers}." },
    { path: ["config", "rule"], label: "Answer rule", kind: "text", help: "number, choice, exact or regex:<pattern>." },
    { path: ["inputs", "rule"], label: "Rule from state", kind: "text", help: "A placeholder for the rule's name, e.g. {rule}." },
  ],
  await: [
    { path: ["config", "wait"], label: "Wait", kind: "select", options: ["always", "on_request"], help: "always: the run waits here for a person every time; on_request: only after a pause." },
    { path: ["config", "on_end"], label: "On end", kind: "text", help: "The node the run goes to when the person ends it or its budget runs out; it finishes when empty." },
  ],
};

function Field({ spec, id, value, onChange }: { spec: FieldSpec; id: string; value: Json; onChange: (v: Json) => void }) {
  const common = { id, label: spec.label, help: spec.help, value };
  switch (spec.kind) {
    case "textarea":
      return <TextField {...common} multiline onChange={onChange} />;
    case "number":
      return <NumberField {...common} onChange={onChange} />;
    case "integer":
      return <NumberField {...common} integer onChange={onChange} />;
    case "list":
      return <ListField {...common} onChange={onChange} />;
    case "json":
      return <JsonField {...common} onChange={onChange} />;
    case "tristate":
      return <TriStateField {...common} onChange={onChange} />;
    case "select":
      return <SelectField {...common} options={spec.options ?? []} onChange={onChange} />;
    default:
      return <TextField {...common} onChange={onChange} />;
  }
}

function IssueList({ issues }: { issues: Issue[] }) {
  if (issues.length === 0) return null;
  return (
    <ul className="node-issues" aria-label="Problems at this node">
      {issues.map((issue, i) => (
        <li key={i}>
          <code>{issue.path}</code>: {issue.message}
        </li>
      ))}
    </ul>
  );
}

export function NodeInspector({ doc, nodeId, issues, onChange, onSelect, onDelete }: {
  doc: WorkflowDoc;
  nodeId: string;
  issues: Issue[];
  onChange: (doc: WorkflowDoc) => void;
  onSelect: (id: string) => void;
  onDelete: () => void;
}) {
  const index = nodeIndex(doc, nodeId);
  const node = index >= 0 ? (doc.nodes as Json[])[index] : null;
  const [idDraft, setIdDraft] = useState(nodeId);
  useEffect(() => setIdDraft(nodeId), [nodeId]);
  if (!node) return <p className="muted">Select a node on the canvas or in the list.</p>;
  const set = (path: Path) => (value: Json) => onChange(setNodeField(doc, nodeId, path, value));
  const stateKeys = Object.keys(stateOf(doc));
  const prefix = `node-${index}`;

  function rename() {
    const next = idDraft.trim();
    if (!next || next === nodeId) {
      setIdDraft(nodeId);
      return;
    }
    onChange(renameNode(doc, nodeId, next));
    onSelect(next);
  }

  return (
    <section aria-labelledby="inspector-title" className="inspector">
      <h3 id="inspector-title">
        {node.type} node <code>{nodeId}</code>
      </h3>
      <IssueList issues={issues} />
      <div className="field">
        <label htmlFor={`${prefix}-id`}>Node id</label>
        <input id={`${prefix}-id`} value={idDraft} onChange={(e) => setIdDraft(e.target.value)} onBlur={rename}
               onKeyDown={(e) => e.key === "Enter" && rename()} aria-describedby={`${prefix}-id-help`} />
        <p id={`${prefix}-id-help`} className="hint">Renaming updates every edge and condition that names it.</p>
      </div>
      <TextField id={`${prefix}-description`} label="Description" value={node.description} onChange={set(["description"])} />
      <SelectField
        id={`${prefix}-output`}
        label="Write Output to State Key"
        value={node.output_key}
        options={stateKeys}
        blank="(none)"
        onChange={set(["output_key"])}
        help="A declared state key (add keys under Workflow)."
      />
      {(FIELDS[node.type] ?? [])
        .filter((spec) => !spec.when || spec.when(node))
        .map((spec) => (
          <Field key={spec.path.join(".")} spec={spec} id={`${prefix}-${spec.path.join("-")}`} value={getIn(node, spec.path)} onChange={set(spec.path)} />
        ))}
      {node.type === "condition" && <CasesEditor doc={doc} nodeId={nodeId} prefix={prefix} onChange={onChange} />}
      <NumberField id={`${prefix}-retries`} label="Retries" integer value={node.retries} onChange={set(["retries"])}
                   help="Extra attempts after a transient model failure (0–5)." />
      {!FIELDS[node.type] && (
        <p className="muted">Unknown node type: edit it in the JSON tab.</p>
      )}
      <div className="actions">
        <button type="button" className="danger" onClick={onDelete}>
          Delete node
        </button>
      </div>
    </section>
  );
}

function CasesEditor({ doc, nodeId, prefix, onChange }: { doc: WorkflowDoc; nodeId: string; prefix: string; onChange: (d: WorkflowDoc) => void }) {
  const index = nodeIndex(doc, nodeId);
  const config = getIn(doc, ["nodes", index, "config"]) ?? {};
  const cases: Json[] = Array.isArray(config.cases) ? config.cases : [];
  const options = targets(doc).filter((t) => t !== nodeId);
  const setCases = (next: Json[]) => onChange(setIn(doc, ["nodes", index, "config", "cases"], next));
  return (
    <fieldset className="cases">
      <legend>Cases (first that passes is taken)</legend>
      {cases.map((c, i) => (
        <div key={i} className="case-row" role="group" aria-label={`Case ${i + 1}`}>
          <SelectField id={`${prefix}-case-${i}-op`} label="Test" value={c?.op ?? "eq"} options={OPS}
                       onChange={(v) => setCases(setIn(cases, [i, "op"], v))} />
          <JsonField id={`${prefix}-case-${i}-value`} label="Value" loose value={c?.value}
                     onChange={(v) => setCases(setIn(cases, [i, "value"], v))} />
          <SelectField id={`${prefix}-case-${i}-goto`} label="Go to" value={c?.goto} options={options}
                       onChange={(v) => setCases(setIn(cases, [i, "goto"], v))} />
          <button type="button" className="quiet danger" onClick={() => setCases(cases.filter((_, j) => j !== i))}>
            Remove case {i + 1}
          </button>
        </div>
      ))}
      <button type="button" className="quiet" onClick={() => setCases([...cases, { op: "eq", value: "", goto: "__end__" }])}>
        Add a case
      </button>
      <SelectField id={`${prefix}-default`} label="Otherwise go to" value={config.default} options={options} blank="__end__ (default)"
                   onChange={(v) => onChange(setIn(doc, ["nodes", index, "config", "default"], v))} />
    </fieldset>
  );
}

export function EdgeInspector({ doc, index, onChange, onDelete }: {
  doc: WorkflowDoc;
  index: number;
  onChange: (doc: WorkflowDoc) => void;
  onDelete: () => void;
}) {
  const edge = edgesOf(doc)[index];
  if (!edge) return <p className="muted">This edge no longer exists.</p>;
  const set = (path: Path) => (value: Json) => onChange(setIn(doc, ["edges", index, ...path], value));
  const options = targets(doc);
  const prefix = `edge-${index}`;
  return (
    <section aria-labelledby="edge-title" className="inspector">
      <h3 id="edge-title">
        Edge <code>{edge.from}</code> → <code>{edge.to}</code>
      </h3>
      <SelectField id={`${prefix}-from`} label="From" value={edge.from} options={options.filter((o) => o !== "__end__")} onChange={set(["from"])} />
      <SelectField id={`${prefix}-to`} label="To" value={edge.to} options={options} onChange={set(["to"])} />
      <div className="field">
        <label>
          <input
            type="checkbox"
            checked={Boolean(edge.when)}
            onChange={(e) => set(["when"])(e.target.checked ? { key: "", op: "eq", value: "" } : undefined)}
          />{" "}
          Only when a test passes
        </label>
      </div>
      {edge.when && (
        <fieldset>
          <legend>Condition</legend>
          <TextField id={`${prefix}-when-key`} label="Key" value={edge.when.key} onChange={set(["when", "key"])} help="A state key or dotted path." />
          <SelectField id={`${prefix}-when-op`} label="Test" value={edge.when.op ?? "eq"} options={OPS} onChange={set(["when", "op"])} />
          <JsonField id={`${prefix}-when-value`} label="Value" loose value={edge.when.value} onChange={set(["when", "value"])} />
        </fieldset>
      )}
      <div className="actions">
        <button type="button" className="danger" onClick={onDelete}>
          Delete edge
        </button>
      </div>
    </section>
  );
}
