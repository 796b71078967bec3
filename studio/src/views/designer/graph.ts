/** The canvas drawn from a workflow document: React Flow nodes and edges, placed by dagre. */
import { Graph, layout } from "@dagrejs/dagre";
import { MarkerType, type Edge, type Node } from "@xyflow/react";

import type { Step } from "../../streams/workflow";
import { edgesOf, END, nodesOf, showLoose, type WfNode, type WorkflowDoc } from "./doc";

export const START = "__start__";
const NODE_W = 240;
const NODE_H = 110;

/** A problem the server found, as `POST /v1/workflows/validate` reports it. */
export interface Issue {
  node: string | null;
  path: string;
  message: string;
  detail: string;
}

export interface CardData extends Record<string, unknown> {
  node: WfNode;
  issues: Issue[];
  step: Step | null;
  isEntry: boolean;
  isFinish: boolean;
}

export type CardNode = Node<CardData, "card">;
export type TerminalNode = Node<{ label: string }, "terminal">;
export type CanvasNode = CardNode | TerminalNode;

/** Which edge of the document (or which case of a condition) a canvas edge stands for. */
export type EdgeRef =
  | { kind: "edge"; index: number }
  | { kind: "case"; node: string; index: number }
  | { kind: "default"; node: string }
  | { kind: "entry" }
  | { kind: "finish"; node: string };

export function edgeRef(id: string): EdgeRef | null {
  const [kind, a, b] = id.split(":");
  if (kind === "e") return { kind: "edge", index: Number(a) };
  if (kind === "c") return { kind: "case", node: a, index: Number(b) };
  if (kind === "d") return { kind: "default", node: a };
  if (kind === "s") return { kind: "entry" };
  if (kind === "f") return { kind: "finish", node: a };
  return null;
}

const LABEL_MAX = 28;

/** An edge's test, short enough not to cover its neighbours (the inspector shows it whole). */
function predicateLabel(op: string | undefined, value: unknown, key?: string): string {
  const operator = op ?? "eq";
  const shown = operator === "truthy" || operator === "falsy" ? "" : ` ${showLoose(value)}`;
  const label = `${key ? `${key} ` : ""}${operator}${shown}`;
  return label.length > LABEL_MAX ? `${label.slice(0, LABEL_MAX - 1)}…` : label;
}

export function buildEdges(doc: WorkflowDoc): Edge[] {
  const ids = new Set(nodesOf(doc).map((n) => n.id));
  const known = (id: string) => ids.has(id) || id === END;
  const arrow = { type: MarkerType.ArrowClosed };
  const edges: Edge[] = [];
  if (doc.entry && ids.has(doc.entry)) {
    edges.push({ id: "s:", source: START, target: doc.entry, deletable: false, markerEnd: arrow, className: "edge-entry" });
  }
  edgesOf(doc).forEach((e, index) => {
    if (!ids.has(e.from) || !known(e.to)) return; // the server's problems list names it
    edges.push({
      id: `e:${index}`,
      source: e.from,
      target: e.to,
      label: e.when ? predicateLabel(e.when.op, e.when.value, e.when.key) : undefined,
      markerEnd: arrow,
      className: e.when ? "edge-when" : "edge-plain",
    });
  });
  for (const node of nodesOf(doc)) {
    if (node.type === "condition" && node.config) {
      const cases = Array.isArray(node.config.cases) ? node.config.cases : [];
      cases.forEach((c: { op?: string; value?: unknown; goto?: string }, index: number) => {
        if (c?.goto && known(c.goto)) {
          edges.push({
            id: `c:${node.id}:${index}`, source: node.id, target: c.goto, label: predicateLabel(c.op, c.value),
            deletable: false, markerEnd: arrow, className: "edge-case",
          });
        }
      });
      const fallback = node.config.default ?? END;
      if (known(fallback)) {
        edges.push({ id: `d:${node.id}`, source: node.id, target: fallback, label: "default", deletable: false,
                     markerEnd: arrow, className: "edge-case" });
      }
    }
  }
  for (const id of Array.isArray(doc.finish) ? doc.finish : []) {
    if (ids.has(id)) edges.push({ id: `f:${id}`, source: id, target: END, deletable: false, markerEnd: arrow, className: "edge-finish" });
  }
  return edges;
}

/** Positions for every node, top to bottom in run order (dagre), from their measured sizes when known. */
export function layoutPositions(
  nodeIds: string[],
  edges: Edge[],
  sizes: Map<string, { width?: number; height?: number }> = new Map(),
): Map<string, { x: number; y: number }> {
  const g = new Graph();
  g.setGraph({ rankdir: "TB", nodesep: 40, ranksep: 80, marginx: 20, marginy: 20 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const id of nodeIds) {
    const terminal = id === START || id === END;
    const size = sizes.get(id);
    g.setNode(id, { width: size?.width ?? (terminal ? 90 : NODE_W), height: size?.height ?? (terminal ? 36 : NODE_H) });
  }
  for (const e of edges) if (g.hasNode(e.source) && g.hasNode(e.target) && e.source !== e.target) g.setEdge(e.source, e.target);
  layout(g);
  const positions = new Map<string, { x: number; y: number }>();
  for (const id of nodeIds) {
    const { x, y, width, height } = g.node(id);
    positions.set(id, { x: x - width / 2, y: y - height / 2 });
  }
  return positions;
}

export function buildNodes(
  doc: WorkflowDoc,
  issues: Issue[],
  steps: Map<string, Step>,
  selected: string | null,
): CanvasNode[] {
  const finish = new Set(Array.isArray(doc.finish) ? doc.finish : []);
  const seen = new Set<string>();
  const cards: CanvasNode[] = [];
  for (const node of nodesOf(doc)) {
    if (typeof node.id !== "string" || !node.id || seen.has(node.id)) continue;
    seen.add(node.id);
    cards.push({
      id: node.id,
      type: "card",
      position: { x: 0, y: 0 },
      selected: node.id === selected,
      data: {
        node,
        issues: issues.filter((i) => i.node === node.id),
        step: steps.get(node.id) ?? null,
        isEntry: doc.entry === node.id,
        isFinish: finish.has(node.id),
      },
      ariaLabel: `${node.type} node ${node.id}`,
    });
  }
  const start: TerminalNode = { id: START, type: "terminal", position: { x: 0, y: 0 }, deletable: false, data: { label: "start" } };
  const end: TerminalNode = { id: END, type: "terminal", position: { x: 0, y: 0 }, deletable: false, data: { label: "end" } };
  return [start, ...cards, end];
}
