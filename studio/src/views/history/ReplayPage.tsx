/** One run replayed from its stored events (`GET /v1/runs/{id}/events`) in its mode's own viewer. */
import { useEffect, useState } from "react";
import { Link, useParams } from "react-router";

import { TERMINAL_EVENTS } from "../../api/sse";
import { Badge, ErrorNote, formatCost, formatDate } from "../../components/ui";
import { useSession } from "../../session/session";
import { duelReducer, emptyDuel } from "../../streams/duel";
import { emptyPanel, panelReducer } from "../../streams/panel";
import { emptyExchange, exchangeReducer } from "../../streams/roundtable";
import { useFollow } from "../../streams/useFollow";
import { useStreamReducer, type Reducer } from "../../streams/useStream";
import { emptyWorkflowRun, workflowReducer } from "../../streams/workflow";
import { RunLog } from "../designer/RunPanel";
import { DuelViewer, type Verdict } from "../duel/DuelViewer";
import { PanelViewer } from "../panel/PanelViewer";
import { ExchangeView } from "../roundtable/ExchangeView";
import { KIND_LABELS, type RunDetail } from "./runs";

/** Replay the run's events through `reducer`, following it live if it is still going. */
function useReplay<S>(runId: string, reducer: Reducer<S>, initial: () => S): [S, unknown] {
  const { key } = useSession();
  const [view, push, reset] = useStreamReducer(reducer, initial);
  const stream = useFollow();
  useEffect(() => {
    reset();
    const url = `/v1/runs/${encodeURIComponent(runId)}/events`;
    void stream.start(key, { start: { url }, resume: () => ({ url }), terminal: TERMINAL_EVENTS, onEvent: push });
    return stream.stop;
  }, [runId, key, push, reset, stream.start, stream.stop]);
  return [view, stream.error];
}

function DuelReplay({ run }: { run: RunDetail }) {
  const { api } = useSession();
  const [view, error] = useReplay(run.id, duelReducer, emptyDuel);
  const [verdicts, setVerdicts] = useState<Verdict[] | null>(null);
  const debateId = String(run.ref?.debateId ?? run.id);
  useEffect(() => {
    if (view.status !== "done") return;
    let live = true;
    api<{ verdicts: Verdict[] }>(`/api/debate/${encodeURIComponent(debateId)}`).then(
      (d) => live && setVerdicts(d.verdicts),
      () => live && setVerdicts([]),
    );
    return () => {
      live = false;
    };
  }, [api, debateId, view.status]);
  const rounds = typeof run.input?.rounds === "number" ? run.input.rounds : null;
  return (
    <>
      <ErrorNote error={error} />
      <DuelViewer view={view} rounds={rounds} verdicts={verdicts} />
    </>
  );
}

function TableReplay({ run }: { run: RunDetail }) {
  const [view, error] = useReplay(run.id, exchangeReducer, () => emptyExchange(run.title));
  const conversation = run.ref?.conversationId;
  return (
    <>
      <ErrorNote error={error} />
      {conversation && (
        <p>
          <Link to={`/roundtable/${encodeURIComponent(String(conversation))}`}>Open the whole conversation</Link>
        </p>
      )}
      <ExchangeView exchange={{ ...view, question: run.title }} index={Number(run.ref?.exchange ?? 1) - 1} live />
    </>
  );
}

function PanelReplay({ run }: { run: RunDetail }) {
  const [view, error] = useReplay(run.id, panelReducer, emptyPanel);
  return (
    <>
      <ErrorNote error={error} />
      <PanelViewer view={view} />
    </>
  );
}

function WorkflowReplay({ run }: { run: RunDetail }) {
  const [view, error] = useReplay(run.id, workflowReducer, emptyWorkflowRun);
  return (
    <>
      <ErrorNote error={error} />
      <RunLog run={view} />
    </>
  );
}

const VIEWERS = { duel: DuelReplay, roundtable: TableReplay, panel: PanelReplay, workflow: WorkflowReplay };

export default function ReplayPage() {
  const { id = "" } = useParams();
  const { api } = useSession();
  const [run, setRun] = useState<RunDetail | null>(null);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    let live = true;
    setRun(null);
    api<RunDetail>(`/v1/runs/${encodeURIComponent(id)}`).then((r) => live && setRun(r), (err) => live && setError(err));
    return () => {
      live = false;
    };
  }, [api, id]);

  const Viewer = run ? VIEWERS[run.kind] : null;
  return (
    <div className="area">
      <p>
        <Link to="/history">← History</Link>
      </p>
      <h1>{run ? `${KIND_LABELS[run.kind] ?? run.kind}: ${run.title || run.id}` : "Run"}</h1>
      <ErrorNote error={error} />
      {run && (
        <p className="muted">
          <Badge tone="neutral">{run.status}</Badge> {run.id} · started {formatDate(run.startedAt ?? run.createdAt)} ·{" "}
          {run.usage?.totalTokens ?? 0} tokens · {formatCost(run.usage?.costUsd)}
          {run.error ? ` · ${run.error}` : ""}
        </p>
      )}
      {Viewer && run && <Viewer run={run} />}
      {run && !Viewer && <p className="error">This Studio cannot show runs of kind {run.kind}.</p>}
    </div>
  );
}
