/**
 * The workflow document the designer edits, and pure edits on it. The document is the only truth: the
 * canvas is drawn from it, every edit returns a new document with the keys in their original order,
 * and an untouched import exports exactly as it came in.
 */

export const END = "__end__";
/* Every node type of the workflow schema (designer/spec.py's NODE_TYPES, in its order; a test keeps them equal):
 * the plain ones, the whole modes, then the capability nodes the modes are built of. */
export const NODE_TYPES = [
  "llm", "transform", "condition",
  "debate", "panel", "duel", "roundtable",
  "select_opponent", "synthesize", "score_convergence", "fan_out", "arbitrate", "judge", "vote", "await",
] as const;
export const STATE_TYPES = ["string", "number", "integer", "boolean", "object", "array", "any"] as const;
export const OPS = ["eq", "ne", "gt", "gte", "lt", "lte", "in", "not_in", "contains", "not_contains", "matches", "truthy", "falsy"] as const;

/* The document is whatever JSON was imported (it may be invalid: the server says how), so it is typed loosely. */
export type Json = any;
export type Path = (string | number)[];

export interface WfNode {
  id: string;
  type: string;
  description?: string;
  config?: Record<string, Json>;
  inputs?: Record<string, Json>;
  output_key?: string;
  retries?: number;
}

export interface WfEdge {
  from: string;
  to: string;
  when?: { key: string; op?: string; value?: Json };
}

export interface WfStateKey {
  type?: string;
  default?: Json;
  required?: boolean;
  reducer?: string;
  description?: string;
}

export interface WorkflowDoc {
  version?: number;
  name?: string;
  description?: string;
  state?: Record<string, WfStateKey>;
  nodes?: WfNode[];
  edges?: WfEdge[];
  entry?: string;
  finish?: string[];
  sampleInput?: Record<string, Json>;
  [key: string]: Json;
}

const isObject = (v: unknown): v is Record<string, Json> => typeof v === "object" && v !== null && !Array.isArray(v);

export function nodesOf(doc: WorkflowDoc): WfNode[] {
  return Array.isArray(doc.nodes) ? doc.nodes.filter(isObject) as WfNode[] : [];
}

export function edgesOf(doc: WorkflowDoc): WfEdge[] {
  return Array.isArray(doc.edges) ? doc.edges.filter(isObject) as WfEdge[] : [];
}

export function stateOf(doc: WorkflowDoc): Record<string, WfStateKey> {
  return isObject(doc.state) ? (doc.state as Record<string, WfStateKey>) : {};
}

export function getIn(value: Json, path: Path): Json {
  return path.reduce((v, key) => (v === null || v === undefined ? undefined : v[key]), value);
}

/**
 * `value` at `path`, copying only the containers on the way; `undefined` removes the key. A missing
 * container is created (as an object), appended after the existing keys.
 */
export function setIn(target: Json, path: Path, value: Json): Json {
  if (path.length === 0) return value;
  const [head, ...rest] = path;
  if (Array.isArray(target) && typeof head === "number") {
    const copy = target.slice();
    copy[head] = setIn(copy[head], rest, value);
    return copy;
  }
  const base: Record<string, Json> = isObject(target) ? target : {};
  const child = setIn(base[head as string], rest, value);
  if (child === undefined) {
    if (!(head in base)) return base;
    const copy = { ...base };
    delete copy[head as string];
    return copy;
  }
  return { ...base, [head]: child };
}

/** The index of a node in `doc.nodes` (the raw array, so paths match the server's JSON paths). */
export function nodeIndex(doc: WorkflowDoc, id: string): number {
  return Array.isArray(doc.nodes) ? doc.nodes.findIndex((n) => isObject(n) && n.id === id) : -1;
}

export function setNodeField(doc: WorkflowDoc, id: string, path: Path, value: Json): WorkflowDoc {
  const index = nodeIndex(doc, id);
  return index < 0 ? doc : setIn(doc, ["nodes", index, ...path], value);
}

/** A node id not yet used: `llm`, `llm_2`, `llm_3`, … */
export function freshId(doc: WorkflowDoc, base: string): string {
  const taken = new Set(nodesOf(doc).map((n) => n.id));
  if (!taken.has(base)) return base;
  for (let i = 2; ; i += 1) if (!taken.has(`${base}_${i}`)) return `${base}_${i}`;
}

/** The smallest node of each type that the schema accepts once its blanks are filled. */
export function blankNode(type: string, id: string): WfNode {
  switch (type) {
    case "llm":
      return { id, type, inputs: { prompt: "" } };
    case "transform":
      return { id, type, config: { op: "format" }, inputs: { template: "" } };
    case "condition":
      return { id, type, config: { key: "", cases: [{ op: "eq", value: "", goto: END }] } };
    case "roundtable":
      return { id, type, config: { agents: "workspace" } };
    case "synthesize":
      return { id, type, config: { output_schema: { type: "object", properties: { summary: { type: "string" } } } }, inputs: { prompt: "" } };
    case "fan_out":
      return { id, type, config: { branches: 3 }, inputs: { prompt: "" } };
    case "arbitrate":
    case "vote":
      return { id, type, inputs: { answers: "" } };
    default:
      return { id, type };
  }
}

export function addNode(doc: WorkflowDoc, type: string): [WorkflowDoc, string] {
  const id = freshId(doc, type);
  const nodes = [...(Array.isArray(doc.nodes) ? doc.nodes : []), blankNode(type, id)];
  const next: WorkflowDoc = { ...doc, nodes };
  if (!doc.entry) next.entry = id;
  return [next, id];
}

/** Remove a node and every edge, case, entry and finish that names it. */
export function removeNode(doc: WorkflowDoc, id: string): WorkflowDoc {
  let next: WorkflowDoc = { ...doc, nodes: nodesOf(doc).filter((n) => n.id !== id) };
  if (Array.isArray(doc.edges)) next.edges = edgesOf(doc).filter((e) => e.from !== id && e.to !== id);
  if (Array.isArray(doc.finish)) next.finish = doc.finish.filter((f) => f !== id);
  if (doc.entry === id) next.entry = nodesOf(next)[0]?.id ?? "";
  next = mapConditions(next, (config) => ({
    ...config,
    ...(Array.isArray(config.cases) ? { cases: config.cases.map((c: Json) => (c?.goto === id ? { ...c, goto: END } : c)) } : {}),
    ...(config.default === id ? { default: END } : {}),
  }));
  return next;
}

/** Rename a node and every reference to it (edges, cases, defaults, entry, finish). */
export function renameNode(doc: WorkflowDoc, from: string, to: string): WorkflowDoc {
  if (from === to) return doc;
  const swap = (v: string) => (v === from ? to : v);
  let next: WorkflowDoc = { ...doc, nodes: (doc.nodes ?? []).map((n) => (isObject(n) && n.id === from ? { ...n, id: to } : n)) };
  if (Array.isArray(doc.edges)) next.edges = doc.edges.map((e) => (isObject(e) ? { ...e, from: swap(e.from), to: swap(e.to) } : e));
  if (Array.isArray(doc.finish)) next.finish = doc.finish.map(swap);
  if (doc.entry === from) next.entry = to;
  next = mapConditions(next, (config) => ({
    ...config,
    ...(Array.isArray(config.cases) ? { cases: config.cases.map((c: Json) => (isObject(c) && c.goto === from ? { ...c, goto: to } : c)) } : {}),
    ...(config.default === from ? { default: to } : {}),
  }));
  return next;
}

function mapConditions(doc: WorkflowDoc, update: (config: Record<string, Json>) => Record<string, Json>): WorkflowDoc {
  if (!Array.isArray(doc.nodes)) return doc;
  let changed = false;
  const nodes = doc.nodes.map((n) => {
    if (!isObject(n) || n.type !== "condition" || !isObject(n.config)) return n;
    const config = update(n.config);
    if (JSON.stringify(config) === JSON.stringify(n.config)) return n;
    changed = true;
    return { ...n, config };
  });
  return changed ? { ...doc, nodes } : doc;
}

export function addEdge(doc: WorkflowDoc, from: string, to: string): WorkflowDoc {
  if (edgesOf(doc).some((e) => e.from === from && e.to === to && !e.when)) return doc;
  return { ...doc, edges: [...(Array.isArray(doc.edges) ? doc.edges : []), { from, to }] };
}

export function removeEdge(doc: WorkflowDoc, index: number): WorkflowDoc {
  return { ...doc, edges: (doc.edges ?? []).filter((_, i) => i !== index) };
}

/** Node ids an edge or a condition may lead to, `__end__` included. */
export function targets(doc: WorkflowDoc): string[] {
  return [...nodesOf(doc).map((n) => n.id), END];
}

/** A value typed as JSON when it parses, else kept as text (`3` → 3, `true` → true, `memo` → "memo"). */
export function looseValue(text: string): Json {
  if (text.trim() === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

export function showLoose(value: Json): string {
  if (value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** The keys some node writes: not inputs a run is expected to give. */
export function writtenKeys(doc: WorkflowDoc): Set<string> {
  return new Set(nodesOf(doc).map((n) => n.output_key).filter((k): k is string => typeof k === "string"));
}

export const BLANK_WORKFLOW: WorkflowDoc = {
  version: 1,
  name: "Untitled workflow",
  state: { input: { type: "string", required: true }, answer: { type: "string" } },
  nodes: [{ id: "answer", type: "llm", inputs: { prompt: "{input}" }, output_key: "answer" }],
  edges: [],
  entry: "answer",
  finish: ["answer"],
};

export function exportText(doc: WorkflowDoc): string {
  return `${JSON.stringify(doc, null, 2)}\n`;
}

export function fileName(doc: WorkflowDoc): string {
  const slug = String(doc.name ?? "")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "");
  return `${slug || "workflow"}.json`;
}
