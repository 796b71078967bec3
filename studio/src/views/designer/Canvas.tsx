/**
 * The workflow drawn as a graph: drag nodes, connect them, select one to edit; a run paints its progress. The text
 * on the canvas stays readable: a workflow too big for the canvas is shown from its start at a readable size and
 * panned (drag, or scroll), never shrunk below `MIN_ZOOM`.
 */
import {
  applyNodeChanges,
  Background,
  ControlButton,
  Controls,
  Handle,
  Panel,
  Position,
  ReactFlow,
  type Connection,
  type Edge,
  type EdgeChange,
  type NodeChange,
  type NodeProps,
  type ReactFlowInstance,
  type Rect,
  type Viewport,
} from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import { memo, useCallback, useEffect, useMemo, useRef, useState } from "react";

import { count } from "../../components/ui";
import { stepText, type Step } from "../../streams/workflow";
import { END, type WfNode, type WorkflowDoc } from "./doc";
import {
  buildEdges,
  buildNodes,
  edgeRef,
  layoutPositions,
  START,
  type CanvasNode,
  type CardNode,
  type EdgeRef,
  type Issue,
  type TerminalNode,
} from "./graph";

function summary(node: WfNode): string {
  const config = node.config ?? {};
  const inputs = node.inputs ?? {};
  switch (node.type) {
    case "llm":
      return String(inputs.prompt ?? "");
    case "transform":
      return `${config.op ?? "?"}${config.key ? ` ${config.key}` : ""}${Array.isArray(config.keys) ? ` ${config.keys.join(", ")}` : ""}`;
    case "condition":
      return `routes on ${config.key ?? "?"}`;
    case "debate":
      return [config.system_prompt ? "System Prompt set" : "", config.arbitrator_prompt ? "Arbitrator Prompt set" : ""]
        .filter(Boolean)
        .join(" · ") || `asks ${inputs.input ?? "{input}"}`;
    case "panel":
      return `asks ${inputs.input ?? "{input}"}`;
    case "duel":
      return `on ${inputs.topic ?? "{topic}"}`;
    case "roundtable":
      if (Array.isArray(config.agents)) return count(config.agents.length, "agent");
      return typeof config.agents === "number" ? count(config.agents, "agent") : `${config.agents ?? "?"} agents`;
    case "select_opponent":
      return `casts for ${inputs.topic ?? "{topic}"}`;
    case "synthesize":
      return String(inputs.prompt ?? "");
    case "score_convergence":
      return `scores ${inputs.transcript ?? "{transcript}"}`;
    case "fan_out": {
      const branches = config.branches ?? (Array.isArray(config.models) ? config.models.length : "?");
      const counted = typeof branches === "number" ? count(branches, "branch", "branches") : `${branches} branches`;
      return `${counted}${inputs.previous ? ` revising ${inputs.previous}` : ""}`;
    }
    case "arbitrate":
      return `arbitrates ${inputs.answers ?? "?"}`;
    case "judge":
      return `judges ${inputs.messages ?? "{messages}"}`;
    case "vote":
      return `majority of ${inputs.answers ?? "?"}`;
    case "await":
      return `${config.wait === "on_request" ? "waits when paused" : "waits for you"}${config.on_end ? `; end → ${config.on_end}` : ""}`;
    default:
      return "";
  }
}

function preview(value: unknown): string {
  if (value === undefined) return "";
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 160 ? `${text.slice(0, 160)}…` : text;
}

/** The latest event of a nested mode (a panelist answering, a round starting), in a few words. */
function progressText(step: Step): string {
  const last = step.progress[step.progress.length - 1];
  if (!last) return "";
  const data = (last.data ?? {}) as Record<string, unknown>;
  const detail = data.model ?? data.name ?? (data.roundNumber !== undefined ? `round ${data.roundNumber}` : "");
  return `${last.kind}${detail ? ` ${detail}` : ""}`;
}

function RunOverlay({ step }: { step: Step }) {
  const tokens = stepText(step);
  const progress = step.status === "running" ? progressText(step) : "";
  return (
    <div className="node-run">
      <p className="node-run-status">
        {step.status === "running" ? "running" : step.status}
        {step.attempt > 1 ? ` (attempt ${step.attempt})` : ""}
        {progress && <span className="muted"> · {progress}</span>}
      </p>
      {step.status === "running" && tokens && <p className="node-tokens">{tokens.length > 200 ? `…${tokens.slice(-200)}` : tokens}</p>}
      {step.status === "done" && step.output !== undefined && <p className="node-output">{preview(step.output)}</p>}
    </div>
  );
}

const Card = memo(function Card({ data, selected }: NodeProps<CardNode>) {
  const { node, issues, step, isEntry, isFinish } = data;
  const status = step?.status ?? "idle";
  return (
    <div
      className={`wf-node wf-${node.type} status-${status}${issues.length ? " has-issues" : ""}${selected ? " is-selected" : ""}`}
      data-node-id={node.id}
      data-status={status}
    >
      <Handle type="target" position={Position.Top} />
      <p className="wf-node-head">
        <span className="wf-type">{node.type}</span>
        {isEntry && <span className="badge badge-neutral">entry</span>}
        {isFinish && <span className="badge badge-neutral">finish</span>}
      </p>
      <p className="wf-id">{node.id}</p>
      <p className="wf-summary">{preview(summary(node))}</p>
      {node.output_key && <p className="wf-output">→ {node.output_key}</p>}
      {issues.length > 0 && (
        <ul className="node-issues" aria-label={`Problems at ${node.id}`}>
          {issues.map((issue, i) => (
            <li key={i}>
              <code>{issue.path}</code>: {issue.message}
            </li>
          ))}
        </ul>
      )}
      {step && <RunOverlay step={step} />}
      <Handle type="source" position={Position.Bottom} />
    </div>
  );
});

function Terminal({ id, data }: NodeProps<TerminalNode>) {
  return (
    <div className="wf-terminal" data-node-id={id}>
      {id === END && <Handle type="target" position={Position.Top} />}
      {data.label}
      {id === START && <Handle type="source" position={Position.Bottom} />}
    </div>
  );
}

const NODE_TYPES = { card: Card, terminal: Terminal };

// The smallest text on the canvas is 12 px at zoom 1 (styles.css, "Designer"); no zoom draws it below 10 px.
export const MIN_TEXT_PX = 12;
export const MIN_ZOOM = 10 / MIN_TEXT_PX;
const MAX_ZOOM = 2;
const FIT_MARGIN = 24; // px between the workflow and the canvas's edge

/**
 * Where to look at the workflow (`bounds`) on a canvas of `width` × `height` px: the whole of it, at up to its
 * natural size, when it fits at a readable zoom; else at `MIN_ZOOM` from its start (top left), the rest a pan away.
 */
export function viewportFor(bounds: Rect, width: number, height: number): { viewport: Viewport; overflows: boolean } {
  const fitted = Math.min((width - 2 * FIT_MARGIN) / bounds.width, (height - 2 * FIT_MARGIN) / bounds.height);
  const zoom = Math.min(1, Math.max(MIN_ZOOM, fitted));
  const along = (size: number, start: number, extent: number) =>
    extent * zoom <= size - 2 * FIT_MARGIN ? (size - extent * zoom) / 2 - start * zoom : FIT_MARGIN - start * zoom;
  return {
    viewport: { x: along(width, bounds.x, bounds.width), y: along(height, bounds.y, bounds.height), zoom },
    overflows: fitted < MIN_ZOOM,
  };
}

/** React Flow's "fit view" frame, for the button that shows the workflow from its start. */
function FitIcon() {
  return (
    <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 30" aria-hidden="true">
      <path d="M3.692 4.63c0-.53.4-.938.939-.938h5.215V0H4.708C2.13 0 0 2.054 0 4.63v5.216h3.692V4.631zM27.354 0h-5.2v3.692h5.17c.53 0 .984.4.984.939v5.215H32V4.631A4.624 4.624 0 0027.354 0zm.954 24.83c0 .532-.4.94-.939.94h-5.215v3.768h5.215c2.577 0 4.631-2.13 4.631-4.707v-5.139h-3.692v5.139zm-23.677.94c-.531 0-.939-.4-.939-.94v-5.138H0v5.139c0 2.577 2.13 4.707 4.708 4.707h5.138V25.77H4.631z" />
    </svg>
  );
}

export interface CanvasProps {
  doc: WorkflowDoc;
  issues: Issue[];
  steps: Map<string, Step>;
  selectedNode: string | null;
  selectedEdge: string | null;
  onSelectNode: (id: string | null) => void;
  onSelectEdge: (id: string | null) => void;
  onRemoveNodes: (ids: string[]) => void;
  onRemoveEdges: (refs: EdgeRef[]) => void;
  onConnect: (from: string, to: string) => void;
  /** Bumped to lay every node out afresh. */
  layoutVersion: number;
}

export function Canvas(props: CanvasProps) {
  const { doc, issues, steps, selectedNode, selectedEdge } = props;
  const edges = useMemo(
    () => buildEdges(doc).map((e): Edge => ({ ...e, selected: e.id === selectedEdge })),
    [doc, selectedEdge],
  );
  const derived = useMemo(() => buildNodes(doc, issues, steps, selectedNode), [doc, issues, steps, selectedNode]);
  // Nodes keep what React Flow measured and where the user dragged them; new ones are placed by dagre.
  const [nodes, setNodes] = useState<CanvasNode[]>([]);
  const flow = useRef<ReactFlowInstance<CanvasNode> | null>(null);
  const box = useRef<HTMLDivElement | null>(null);
  const [overflows, setOverflows] = useState(false);

  /** Show the workflow from its start at a readable size (`viewportFor`). */
  const fit = useCallback(() => {
    const instance = flow.current;
    const el = box.current;
    if (!instance || !el || instance.getNodes().length === 0) return;
    const { viewport, overflows } = viewportFor(instance.getNodesBounds(instance.getNodes()), el.clientWidth, el.clientHeight);
    void instance.setViewport(viewport);
    setOverflows(overflows);
  }, []);
  // Laid out once more when every node has been measured, so the real sizes are spaced, then fitted.
  const [sized, setSized] = useState(false);
  const layoutKey = `${props.layoutVersion}:${sized}`;
  const appliedLayout = useRef("");

  useEffect(() => {
    const relayout = appliedLayout.current !== layoutKey;
    appliedLayout.current = layoutKey;
    setNodes((previous) => {
      const before = new Map(previous.map((n) => [n.id, n]));
      const place = relayout || derived.some((n) => !before.has(n.id));
      const sizes = new Map(previous.map((n) => [n.id, n.measured ?? {}]));
      const placed = place ? layoutPositions(derived.map((n) => n.id), edges, sizes) : null;
      return derived.map((n) => {
        const old = before.get(n.id);
        const position = (!relayout && old ? old.position : placed?.get(n.id)) ?? n.position;
        return { ...n, position, measured: old?.measured } as CanvasNode;
      });
    });
    if (relayout && sized) requestAnimationFrame(fit);
  }, [derived, edges, layoutKey, sized, fit]);

  useEffect(() => {
    if (!sized && nodes.length > 0 && nodes.every((n) => n.measured?.height)) setSized(true);
  }, [nodes, sized]);

  // A node chosen off the canvas (the node list, a problem's button) is brought into view if it is out of it.
  useEffect(() => {
    const instance = flow.current;
    const el = box.current;
    const node = selectedNode ? instance?.getNode(selectedNode) : undefined;
    if (!instance || !el || !node?.measured?.width || !node.measured.height) return;
    const { x, y, zoom } = instance.getViewport();
    const left = node.position.x * zoom + x;
    const top = node.position.y * zoom + y;
    const inside = left >= 0 && top >= 0 && left + node.measured.width * zoom <= el.clientWidth &&
      top + node.measured.height * zoom <= el.clientHeight;
    if (!inside) {
      void instance.setCenter(node.position.x + node.measured.width / 2, node.position.y + node.measured.height / 2, { zoom });
    }
  }, [selectedNode, sized]);

  function onNodesChange(changes: NodeChange<CanvasNode>[]) {
    const removed = changes.filter((c) => c.type === "remove").map((c) => c.id).filter((id) => id !== START && id !== END);
    if (removed.length) props.onRemoveNodes(removed);
    for (const c of changes) if (c.type === "select" && c.selected) props.onSelectNode(c.id === START || c.id === END ? null : c.id);
    setNodes((current) => applyNodeChanges(changes.filter((c) => c.type === "position" || c.type === "dimensions"), current));
  }

  function onEdgesChange(changes: EdgeChange[]) {
    const refs = changes.filter((c) => c.type === "remove").map((c) => edgeRef(c.id)).filter((r): r is EdgeRef => r !== null);
    if (refs.length) props.onRemoveEdges(refs);
    for (const c of changes) if (c.type === "select" && c.selected) props.onSelectEdge(c.id);
  }

  function connect(connection: Connection) {
    if (connection.source && connection.target) props.onConnect(connection.source, connection.target);
  }

  return (
    <div className="canvas" aria-label="Workflow canvas" role="region" ref={box}>
      <ReactFlow
        nodes={nodes}
        edges={edges}
        nodeTypes={NODE_TYPES}
        onNodesChange={onNodesChange}
        onEdgesChange={onEdgesChange}
        onConnect={connect}
        onNodeClick={(_, node) => props.onSelectNode(node.id === START || node.id === END ? null : node.id)}
        onEdgeClick={(_, edge) => props.onSelectEdge(edge.id)}
        onInit={(instance) => {
          flow.current = instance;
        }}
        onPaneClick={() => {
          props.onSelectNode(null);
          props.onSelectEdge(null);
        }}
        deleteKeyCode={["Delete", "Backspace"]}
        minZoom={MIN_ZOOM}
        maxZoom={MAX_ZOOM}
        panOnScroll
        proOptions={{ hideAttribution: true }}
      >
        <Background />
        <Controls showInteractive={false} showFitView={false}>
          <ControlButton onClick={fit} title="Show the workflow from its start" aria-label="Show the workflow from its start">
            <FitIcon />
          </ControlButton>
        </Controls>
        {overflows && (
          <Panel position="top-right" className="canvas-hint">
            Drag or scroll to see the rest of the workflow
          </Panel>
        )}
      </ReactFlow>
    </div>
  );
}
