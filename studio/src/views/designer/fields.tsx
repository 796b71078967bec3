/** Form fields bound to one value of the workflow document; an emptied field removes its key. */
import { useEffect, useState } from "react";

import { showLoose, looseValue, type Json } from "./doc";

interface Base {
  id: string;
  label: string;
  help?: string;
}

function Help({ id, help }: { id: string; help?: string }) {
  return help ? (
    <p id={`${id}-help`} className="hint">
      {help}
    </p>
  ) : null;
}

export function TextField({ id, label, help, value, onChange, multiline = false }: Base & {
  value: Json;
  onChange: (value: string | undefined) => void;
  multiline?: boolean;
}) {
  const text = typeof value === "string" ? value : value === undefined || value === null ? "" : String(value);
  const props = {
    id,
    value: text,
    "aria-describedby": help ? `${id}-help` : undefined,
    onChange: (e: React.ChangeEvent<HTMLInputElement | HTMLTextAreaElement>) =>
      onChange(e.target.value === "" ? undefined : e.target.value),
  };
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {multiline ? <textarea rows={4} {...props} /> : <input {...props} />}
      <Help id={id} help={help} />
    </div>
  );
}

export function NumberField({ id, label, help, value, onChange, integer = false }: Base & {
  value: Json;
  onChange: (value: number | undefined) => void;
  integer?: boolean;
}) {
  const [draft, setDraft] = useState(value === undefined || value === null ? "" : String(value));
  useEffect(() => setDraft(value === undefined || value === null ? "" : String(value)), [value]);
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <input
        id={id}
        type="number"
        step={integer ? 1 : "any"}
        value={draft}
        aria-describedby={help ? `${id}-help` : undefined}
        onChange={(e) => {
          setDraft(e.target.value);
          const n = Number(e.target.value);
          if (e.target.value === "") onChange(undefined);
          else if (Number.isFinite(n)) onChange(n);
        }}
      />
      <Help id={id} help={help} />
    </div>
  );
}

export function SelectField({ id, label, help, value, options, onChange, blank }: Base & {
  value: Json;
  options: readonly string[];
  onChange: (value: string | undefined) => void;
  /** Text of an empty choice that removes the key; no empty choice when omitted. */
  blank?: string;
}) {
  const current = typeof value === "string" ? value : "";
  const choices = current && !options.includes(current) ? [current, ...options] : options;
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <select id={id} value={current} aria-describedby={help ? `${id}-help` : undefined}
              onChange={(e) => onChange(e.target.value === "" ? undefined : e.target.value)}>
        {(blank !== undefined || !current) && <option value="">{blank ?? "choose…"}</option>}
        {choices.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </select>
      <Help id={id} help={help} />
    </div>
  );
}

/** An optional boolean: unset (the default applies), yes or no. */
export function TriStateField({ id, label, help, value, onChange }: Base & { value: Json; onChange: (v: boolean | undefined) => void }) {
  const current = value === true ? "yes" : value === false ? "no" : "";
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <select id={id} value={current} aria-describedby={help ? `${id}-help` : undefined}
              onChange={(e) => onChange(e.target.value === "" ? undefined : e.target.value === "yes")}>
        <option value="">default</option>
        <option value="yes">yes</option>
        <option value="no">no</option>
      </select>
      <Help id={id} help={help} />
    </div>
  );
}

/** A list given as comma-separated text. */
export function ListField({ id, label, help, value, onChange }: Base & { value: Json; onChange: (v: string[] | undefined) => void }) {
  const [draft, setDraft] = useState(Array.isArray(value) ? value.join(", ") : "");
  useEffect(() => setDraft(Array.isArray(value) ? value.join(", ") : ""), [value]);
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <input
        id={id}
        value={draft}
        aria-describedby={`${id}-help`}
        onChange={(e) => setDraft(e.target.value)}
        onBlur={() => {
          const items = draft.split(",").map((s) => s.trim()).filter(Boolean);
          onChange(items.length ? items : undefined);
        }}
      />
      <p id={`${id}-help`} className="hint">
        {help ? `${help} ` : ""}Separate items with commas.
      </p>
    </div>
  );
}

/** A value typed as JSON (objects, lists, schemas); applied when the field loses focus and parses. */
export function JsonField({ id, label, help, value, onChange, loose = false }: Base & {
  value: Json;
  onChange: (v: Json) => void;
  /** Accept plain text as a string (case values, defaults). */
  loose?: boolean;
}) {
  const shown = loose ? showLoose(value) : value === undefined ? "" : JSON.stringify(value, null, 2);
  const [draft, setDraft] = useState(shown);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    setDraft(shown);
    setError(null);
  }, [shown]);
  const multiline = !loose;
  const commit = () => {
    if (loose) {
      onChange(looseValue(draft));
      return;
    }
    if (draft.trim() === "") {
      onChange(undefined);
      return;
    }
    try {
      onChange(JSON.parse(draft));
      setError(null);
    } catch (err) {
      setError(`Not valid JSON: ${(err as Error).message}`);
    }
  };
  const props = {
    id,
    value: draft,
    "aria-describedby": `${id}-help`,
    "aria-invalid": error ? true : undefined,
    onChange: (e: React.ChangeEvent<HTMLInputElement | HTMLTextAreaElement>) => setDraft(e.target.value),
    onBlur: commit,
  };
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {multiline ? <textarea rows={5} className="mono" {...props} /> : <input {...props} />}
      <p id={`${id}-help`} className="hint">
        {help ? `${help} ` : ""}
        {loose ? "Typed as JSON when it parses (3, true, [\"a\"]), else text." : "JSON; applied when you leave the field."}
      </p>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
    </div>
  );
}
