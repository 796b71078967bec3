/**
 * Designer: a workflow on a canvas. Import, edit, validate (problems shown on the node they name), export,
 * save, and run it with a live overlay of which node runs and what it writes.
 */
import { useCallback, useEffect, useMemo, useRef, useState } from "react";

import { describeError } from "../../api/client";
import { TERMINAL_EVENTS } from "../../api/sse";
import { count, ErrorNote, FollowNote, StatusLine } from "../../components/ui";
import { useSession } from "../../session/session";
import { useFollow } from "../../streams/useFollow";
import { useStreamReducer } from "../../streams/useStream";
import { emptyWorkflowRun, latestSteps, workflowReducer } from "../../streams/workflow";
import { Canvas } from "./Canvas";
import {
  addEdge,
  addNode,
  BLANK_WORKFLOW,
  END,
  exportText,
  fileName,
  nodeIndex,
  nodesOf,
  NODE_TYPES,
  removeEdge,
  removeNode,
  setIn,
  type Json,
  type WorkflowDoc,
} from "./doc";
import { EXAMPLES } from "./examples";
import { START, type EdgeRef, type Issue } from "./graph";
import { EdgeInspector, NodeInspector } from "./Inspector";
import { RunPanel } from "./RunPanel";
import { JsonPanel, WorkflowPanel } from "./WorkflowPanel";

type Tab = "inspect" | "workflow" | "run" | "json";
const TABS: { id: Tab; label: string }[] = [
  { id: "inspect", label: "Inspector" },
  { id: "workflow", label: "Workflow" },
  { id: "run", label: "Run" },
  { id: "json", label: "JSON" },
];

interface Validation {
  valid: boolean;
  errors: Issue[];
}

interface SavedWorkflow {
  id: string;
  name: string;
  workflow: WorkflowDoc;
}

/** Ask the server whether the document is valid, a moment after the last edit. */
function useValidation(doc: WorkflowDoc): { validation: Validation | null; error: unknown } {
  const { api, allows } = useSession();
  const [validation, setValidation] = useState<Validation | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    if (!allows("workflows")) return;
    const controller = new AbortController();
    const timer = setTimeout(() => {
      api<Validation>("/v1/workflows/validate", { method: "POST", body: doc, signal: controller.signal }).then(
        (v) => {
          setValidation(v);
          setError(null);
        },
        (err) => !controller.signal.aborted && setError(err),
      );
    }, 250);
    return () => {
      clearTimeout(timer);
      controller.abort();
    };
  }, [api, allows, doc]);
  return { validation, error };
}

export default function DesignerPage() {
  const { key, api, allows, writes } = useSession();
  const [doc, setDoc] = useState<WorkflowDoc>(BLANK_WORKFLOW);
  const [docVersion, setDocVersion] = useState(0);
  const [layoutVersion, setLayoutVersion] = useState(0);
  const [selectedNode, setSelectedNode] = useState<string | null>(null);
  const [selectedEdge, setSelectedEdge] = useState<string | null>(null);
  const [tab, setTab] = useState<Tab>("workflow");
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [example, setExample] = useState(EXAMPLES[0]?.name ?? "");
  const [newType, setNewType] = useState<string>("llm");
  const [saved, setSaved] = useState<SavedWorkflow[]>([]);
  const [savedChoice, setSavedChoice] = useState("");
  const fileInput = useRef<HTMLInputElement>(null);
  const runId = useRef<string | null>(null);

  const { validation, error: validationError } = useValidation(doc);
  const issues = useMemo(() => validation?.errors ?? [], [validation]);
  const [run, push, resetRun] = useStreamReducer(workflowReducer, emptyWorkflowRun);
  const steps = useMemo(() => latestSteps(run), [run]);
  const stream = useFollow();

  const loadSaved = useCallback(async () => {
    if (!allows("workflows")) return;
    try {
      setSaved((await api<{ data: SavedWorkflow[] }>("/v1/workflows")).data);
    } catch (err) {
      setError(err);
    }
  }, [api, allows]);

  useEffect(() => {
    void loadSaved();
  }, [loadSaved]);

  /** Replace the document (a new, an example, an import): fresh layout, no selection, no run. */
  function open(next: WorkflowDoc, message: string) {
    setDoc(next);
    setDocVersion((v) => v + 1);
    setSelectedNode(null);
    setSelectedEdge(null);
    resetRun();
    setNotice(message);
    setError(null);
  }

  async function openExample() {
    const found = EXAMPLES.find((e) => e.name === example);
    if (!found) return;
    open(JSON.parse(await found.load()), `Opened the example ${found.name}.`);
  }

  async function importFile(event: React.ChangeEvent<HTMLInputElement>) {
    const file = event.target.files?.[0];
    event.target.value = "";
    if (!file) return;
    try {
      const parsed = JSON.parse(await file.text());
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("a workflow is a JSON object");
      open(parsed, `Imported ${file.name}.`);
    } catch (err) {
      setError(`Could not import ${file.name}: ${(err as Error).message}`);
    }
  }

  function exportFile() {
    const url = URL.createObjectURL(new Blob([exportText(doc)], { type: "application/json" }));
    const link = document.createElement("a");
    link.href = url;
    link.download = fileName(doc);
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 0);
  }

  async function save() {
    try {
      const stored = await api<SavedWorkflow>("/v1/workflows", { method: "POST", body: doc });
      setNotice(`Saved as ${stored.id}.`);
      setError(null);
      await loadSaved();
    } catch (err) {
      setError(err);
    }
  }

  function openSaved() {
    const found = saved.find((w) => w.id === savedChoice);
    if (found) open(found.workflow, `Opened ${found.name} (${found.id}).`);
  }

  function selectNode(id: string | null) {
    setSelectedNode(id);
    if (id) {
      setSelectedEdge(null);
      setTab("inspect");
    }
  }

  function selectEdge(id: string | null) {
    setSelectedEdge(id);
    if (id) {
      setSelectedNode(null);
      setTab("inspect");
    }
  }

  function removeEdges(refs: EdgeRef[]) {
    let next = doc;
    const indexes = refs.filter((r) => r.kind === "edge").map((r) => (r as { index: number }).index).sort((a, b) => b - a);
    for (const i of indexes) next = removeEdge(next, i);
    for (const r of refs) if (r.kind === "finish") next = { ...next, finish: (next.finish ?? []).filter((f) => f !== r.node) };
    setDoc(next);
    setSelectedEdge(null);
  }

  function connect(from: string, to: string) {
    if (from === START) setDoc(setIn(doc, ["entry"], to));
    else if (to === END) setDoc({ ...doc, finish: Array.from(new Set([...(doc.finish ?? []), from])) });
    else setDoc(addEdge(doc, from, to));
  }

  function addNodeOfType() {
    const [next, id] = addNode(doc, newType);
    setDoc(next);
    selectNode(id);
  }

  function startRun(input: Record<string, Json>) {
    resetRun();
    runId.current = null;
    setTab("run");
    void stream.start(key, {
      start: { url: "/v1/workflows/runs/stream", method: "POST", body: { workflow: doc, input } },
      resume: () => (runId.current ? { url: `/v1/runs/${encodeURIComponent(runId.current)}/events` } : null),
      terminal: TERMINAL_EVENTS,
      onOpen(response) {
        runId.current = runId.current ?? response.headers.get("X-Run-Id");
      },
      onEvent: push,
    });
  }

  async function stopRun() {
    if (runId.current) {
      try {
        await api(`/v1/runs/${encodeURIComponent(runId.current)}/cancel`, { method: "POST" });
        return; // the stream ends with `cancelled`
      } catch (err) {
        setError(`Could not cancel the run: ${describeError(err)}`);
      }
    }
    stream.stop();
  }

  const edgeIndex = selectedEdge?.startsWith("e:") ? Number(selectedEdge.slice(2)) : null;
  const problems = validation?.errors ?? [];
  return (
    <div className="area designer">
      <h1>Designer</h1>
      <div className="toolbar" role="toolbar" aria-label="Workflow">
        <button type="button" onClick={() => open(BLANK_WORKFLOW, "Started a new workflow.")}>
          New
        </button>
        <span className="group">
          <label htmlFor="example-choice">Example</label>
          <select id="example-choice" value={example} onChange={(e) => setExample(e.target.value)}>
            {EXAMPLES.map((e) => (
              <option key={e.name}>{e.name}</option>
            ))}
          </select>
          <button type="button" onClick={openExample}>
            Open example
          </button>
        </span>
        <button type="button" onClick={() => fileInput.current?.click()}>
          Import JSON…
        </button>
        <input ref={fileInput} type="file" accept=".json,application/json" hidden onChange={importFile} data-testid="import-file" />
        <button type="button" onClick={exportFile}>
          Export JSON
        </button>
        <button type="button" onClick={save} disabled={!writes("workflows")}>
          Save
        </button>
        {saved.length > 0 && (
          <span className="group">
            <label htmlFor="saved-choice">Saved</label>
            <select id="saved-choice" value={savedChoice} onChange={(e) => setSavedChoice(e.target.value)}>
              <option value="">choose…</option>
              {saved.map((w) => (
                <option key={w.id} value={w.id}>
                  {w.name} ({w.id})
                </option>
              ))}
            </select>
            <button type="button" onClick={openSaved} disabled={!savedChoice}>
              Open
            </button>
          </span>
        )}
        <span className="group">
          <label htmlFor="new-node-type">Node type</label>
          <select id="new-node-type" value={newType} onChange={(e) => setNewType(e.target.value)}>
            {NODE_TYPES.map((t) => (
              <option key={t}>{t}</option>
            ))}
          </select>
          <button type="button" onClick={addNodeOfType}>
            Add node
          </button>
        </span>
        <button type="button" className="quiet" onClick={() => setLayoutVersion((v) => v + 1)}>
          Tidy layout
        </button>
      </div>
      {!allows("workflows") && <p className="error">This key lacks the <code>workflows</code> scope: it cannot validate, save or run.</p>}
      {notice && <p className="muted">{notice}</p>}
      <ErrorNote error={error} />
      <ErrorNote error={validationError} />
      <StatusLine>
        {!allows("workflows")
          ? "Not checked (no workflows scope)."
          : validation === null
            ? "Checking the workflow…"
            : validation.valid
              ? "Valid workflow."
              : `${count(problems.length, "problem")} found.`}
      </StatusLine>
      <div className="designer-grid">
        <div className="designer-main">
          <Canvas
            key={docVersion}
            doc={doc}
            issues={issues}
            steps={steps}
            selectedNode={selectedNode}
            selectedEdge={selectedEdge}
            onSelectNode={selectNode}
            onSelectEdge={selectEdge}
            onRemoveNodes={(ids) => {
              setDoc(ids.reduce(removeNode, doc));
              setSelectedNode(null);
            }}
            onRemoveEdges={removeEdges}
            onConnect={connect}
            layoutVersion={layoutVersion}
          />
          <div className="below-canvas">
            <section aria-labelledby="node-list-title">
              <h2 id="node-list-title">Nodes</h2>
              <ul className="node-list">
                {nodesOf(doc).map((n, i) => {
                  const count = issues.filter((issue) => issue.node === n.id).length;
                  const status = steps.get(n.id)?.status;
                  return (
                    <li key={`${n.id}-${i}`}>
                      <button type="button" className={`quiet${selectedNode === n.id ? " current" : ""}`} aria-pressed={selectedNode === n.id}
                              onClick={() => selectNode(n.id)}>
                        {n.id || "(no id)"} <span className="muted">{n.type}</span>
                        {count > 0 && <span className="badge badge-bad">{count} problem{count > 1 ? "s" : ""}</span>}
                        {status && <span className="badge badge-neutral">{status}</span>}
                      </button>
                    </li>
                  );
                })}
              </ul>
            </section>
            <section aria-labelledby="problems-title">
              <h2 id="problems-title">Problems</h2>
              {problems.length === 0 ? (
                <p className="muted">{validation ? "None." : "…"}</p>
              ) : (
                <ul className="problems">
                  {problems.map((p, i) => (
                    <li key={i}>
                      {p.node && nodeIndex(doc, p.node) >= 0 ? (
                        <button type="button" className="link" onClick={() => selectNode(p.node)}>
                          {p.detail}
                        </button>
                      ) : (
                        p.detail
                      )}
                    </li>
                  ))}
                </ul>
              )}
            </section>
          </div>
        </div>
        <aside className="designer-side" aria-label="Edit and run">
          <Tabs tab={tab} setTab={setTab} />
          <div role="tabpanel" id={`panel-${tab}`} aria-labelledby={`tab-${tab}`} tabIndex={0}>
            {tab === "inspect" &&
              (selectedNode ? (
                <NodeInspector
                  doc={doc}
                  nodeId={selectedNode}
                  issues={issues.filter((i) => i.node === selectedNode)}
                  onChange={setDoc}
                  onSelect={setSelectedNode}
                  onDelete={() => {
                    setDoc(removeNode(doc, selectedNode));
                    setSelectedNode(null);
                  }}
                />
              ) : edgeIndex !== null ? (
                <EdgeInspector doc={doc} index={edgeIndex} onChange={setDoc} onDelete={() => removeEdges([{ kind: "edge", index: edgeIndex }])} />
              ) : (
                <p className="muted">
                  Select a node or an edge to edit it. Conditions' branches are edited on the condition node; drag from a node's
                  bottom handle to another node to connect them.
                </p>
              ))}
            {tab === "workflow" && <WorkflowPanel doc={doc} onChange={setDoc} />}
            {tab === "run" && <RunPanel doc={doc} run={run} running={stream.running} onRun={startRun} onStop={stopRun} />}
            {tab === "json" && <JsonPanel doc={doc} onChange={setDoc} />}
            <ErrorNote error={stream.error} />
            <FollowNote stream={stream} />
          </div>
        </aside>
      </div>
    </div>
  );
}

function Tabs({ tab, setTab }: { tab: Tab; setTab: (t: Tab) => void }) {
  function onKeyDown(event: React.KeyboardEvent) {
    const at = TABS.findIndex((t) => t.id === tab);
    const step = event.key === "ArrowRight" ? 1 : event.key === "ArrowLeft" ? -1 : 0;
    if (!step) return;
    event.preventDefault();
    const next = TABS[(at + step + TABS.length) % TABS.length].id;
    setTab(next);
    document.getElementById(`tab-${next}`)?.focus();
  }
  return (
    <div role="tablist" aria-label="Panels" className="tabs" onKeyDown={onKeyDown}>
      {TABS.map((t) => (
        <button
          key={t.id}
          id={`tab-${t.id}`}
          role="tab"
          type="button"
          aria-selected={tab === t.id}
          aria-controls={`panel-${t.id}`}
          tabIndex={tab === t.id ? 0 : -1}
          onClick={() => setTab(t.id)}
        >
          {t.label}
        </button>
      ))}
    </div>
  );
}
