/** The workflow's own fields: name, description, entry, finish, and its declared state keys. */
import { useEffect, useState } from "react";

import { nodesOf, setIn, stateOf, STATE_TYPES, type WfStateKey, type WorkflowDoc } from "./doc";
import { JsonField, SelectField, TextField } from "./fields";

export function WorkflowPanel({ doc, onChange }: { doc: WorkflowDoc; onChange: (doc: WorkflowDoc) => void }) {
  const ids = nodesOf(doc).map((n) => n.id);
  const finish = new Set(Array.isArray(doc.finish) ? doc.finish : []);

  function toggleFinish(id: string, on: boolean) {
    const current = Array.isArray(doc.finish) ? doc.finish : [];
    onChange({ ...doc, finish: on ? [...current, id] : current.filter((f) => f !== id) });
  }

  return (
    <section aria-labelledby="workflow-title" className="inspector">
      <h3 id="workflow-title">Workflow</h3>
      <TextField id="wf-name" label="Name" value={doc.name} onChange={(v) => onChange(setIn(doc, ["name"], v))} />
      <TextField id="wf-description" label="Description" multiline value={doc.description}
                 onChange={(v) => onChange(setIn(doc, ["description"], v))} />
      <SelectField id="wf-entry" label="Entry (runs first)" value={doc.entry} options={ids}
                   onChange={(v) => onChange(setIn(doc, ["entry"], v))} />
      <fieldset>
        <legend>Finish after</legend>
        {ids.map((id) => (
          <label key={id} className="check">
            <input type="checkbox" checked={finish.has(id)} onChange={(e) => toggleFinish(id, e.target.checked)} /> {id}
          </label>
        ))}
      </fieldset>
      <StateKeys doc={doc} onChange={onChange} />
    </section>
  );
}

function StateKeys({ doc, onChange }: { doc: WorkflowDoc; onChange: (doc: WorkflowDoc) => void }) {
  const state = stateOf(doc);
  const [name, setName] = useState("");
  const [type, setType] = useState("string");
  const [problem, setProblem] = useState<string | null>(null);

  function add(event: React.FormEvent) {
    event.preventDefault();
    const key = name.trim();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
      setProblem("A key starts with a letter or _, then letters, digits or _.");
      return;
    }
    if (key in state) {
      setProblem(`'${key}' is already declared.`);
      return;
    }
    setProblem(null);
    onChange(setIn(doc, ["state", key], { type }));
    setName("");
  }

  return (
    <section aria-labelledby="state-title">
      <h4 id="state-title">State keys</h4>
      {Object.entries(state).map(([key, spec]) => (
        <StateKeyRow key={key} name={key} spec={spec} doc={doc} onChange={onChange} />
      ))}
      <form onSubmit={add} className="inline-form" aria-label="Declare a state key">
        <label htmlFor="new-state-key">New key</label>
        <input id="new-state-key" value={name} onChange={(e) => setName(e.target.value)} />
        <label htmlFor="new-state-type">Type</label>
        <select id="new-state-type" value={type} onChange={(e) => setType(e.target.value)}>
          {STATE_TYPES.map((t) => (
            <option key={t}>{t}</option>
          ))}
        </select>
        <button type="submit">Declare</button>
      </form>
      {problem && (
        <p role="alert" className="error">
          {problem}
        </p>
      )}
    </section>
  );
}

function renameKey(doc: WorkflowDoc, from: string, to: string): WorkflowDoc {
  // Rebuilt entry by entry so the renamed key keeps its place.
  const state = Object.fromEntries(Object.entries(stateOf(doc)).map(([k, v]) => [k === from ? to : k, v]));
  return { ...doc, state };
}

function StateKeyRow({ name, spec, doc, onChange }: { name: string; spec: WfStateKey; doc: WorkflowDoc; onChange: (d: WorkflowDoc) => void }) {
  const [draft, setDraft] = useState(name);
  useEffect(() => setDraft(name), [name]);
  const set = (field: string) => (value: unknown) => onChange(setIn(doc, ["state", name, field], value));
  const prefix = `state-${name}`;
  const commitName = () => {
    const next = draft.trim();
    if (next && next !== name && !(next in stateOf(doc)) && /^[A-Za-z_][A-Za-z0-9_]*$/.test(next)) onChange(renameKey(doc, name, next));
    else setDraft(name);
  };
  return (
    <fieldset className="state-key">
      <legend>{name}</legend>
      <div className="field">
        <label htmlFor={`${prefix}-name`}>Key</label>
        <input id={`${prefix}-name`} value={draft} onChange={(e) => setDraft(e.target.value)} onBlur={commitName}
               onKeyDown={(e) => e.key === "Enter" && commitName()} />
      </div>
      <SelectField id={`${prefix}-type`} label="Type" value={spec.type} options={STATE_TYPES} blank="any (default)" onChange={set("type")} />
      <div className="field">
        <label className="check">
          <input type="checkbox" checked={Boolean(spec.required)} onChange={(e) => set("required")(e.target.checked ? true : undefined)} />{" "}
          Required input
        </label>
      </div>
      <JsonField id={`${prefix}-default`} label="Default" loose value={spec.default} onChange={set("default")} />
      <SelectField id={`${prefix}-reducer`} label="Reducer" value={spec.reducer} options={["replace", "append"]} blank="replace (default)"
                   onChange={set("reducer")} />
      <TextField id={`${prefix}-description`} label="Description" value={spec.description} onChange={set("description")} />
      <button type="button" className="quiet danger" onClick={() => onChange(setIn(doc, ["state", name], undefined))}>
        Remove {name}
      </button>
    </fieldset>
  );
}

/** The whole document as JSON, for what the forms do not cover. */
export function JsonPanel({ doc, onChange }: { doc: WorkflowDoc; onChange: (doc: WorkflowDoc) => void }) {
  const text = JSON.stringify(doc, null, 2);
  const [draft, setDraft] = useState(text);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => setDraft(text), [text]);

  function apply() {
    try {
      const parsed = JSON.parse(draft);
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("a workflow is a JSON object");
      setError(null);
      onChange(parsed);
    } catch (err) {
      setError(`Not applied: ${(err as Error).message}`);
    }
  }

  return (
    <section aria-labelledby="json-title" className="inspector">
      <h3 id="json-title">Document</h3>
      <label htmlFor="wf-json" className="sr-only">
        Workflow JSON
      </label>
      <textarea id="wf-json" className="mono json-editor" rows={24} value={draft} onChange={(e) => setDraft(e.target.value)} spellCheck={false} />
      <div className="actions">
        <button type="button" onClick={apply}>
          Apply JSON
        </button>
      </div>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
    </section>
  );
}

