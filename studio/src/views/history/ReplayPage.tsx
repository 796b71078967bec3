/** One run replayed from its stored events (`GET /v1/runs/{id}/events`) in its mode's own viewer. */
import { useCallback, useEffect, useState } from "react";
import { Link, useParams } from "react-router";

import { TERMINAL_EVENTS } from "../../api/sse";
import { DUEL_ROUNDS } from "../../api/limits";
import { Badge, count, ErrorNote, FollowNote, formatCost, formatDate, paidParts } from "../../components/ui";
import { useSession } from "../../session/session";
import { duelReducer, emptyDuel } from "../../streams/duel";
import { emptyPanel, panelReducer } from "../../streams/panel";
import { emptyExchange, exchangeReducer } from "../../streams/roundtable";
import { useFollow, type FollowState } from "../../streams/useFollow";
import { useStreamReducer, type Reducer } from "../../streams/useStream";
import { emptyWorkflowRun, workflowReducer } from "../../streams/workflow";
import { RunLog } from "../designer/RunPanel";
import { DuelViewer, type Verdict } from "../duel/DuelViewer";
import { familiesToChoose, useModels } from "../panel/ModelPicker";
import { PanelViewer } from "../panel/PanelViewer";
import { ExchangeView } from "../roundtable/ExchangeView";
import { KIND_LABELS, type RunDetail } from "./runs";

/** What a viewer of one run is given: the run, and what to call when its events end (the page reads the run's
 * record again, so a run followed to its end shows its final status). */
interface ViewerProps {
  run: RunDetail;
  onEnd: () => void;
}

/** Replay the run's events through `reducer`, following it live (through a storage outage, too) to its end. */
function useReplay<S>(runId: string, reducer: Reducer<S>, initial: () => S, onEnd: () => void): [S, FollowState] {
  const { key } = useSession();
  const [view, push, reset] = useStreamReducer(reducer, initial);
  const stream = useFollow();
  useEffect(() => {
    reset();
    let live = true;
    const url = `/v1/runs/${encodeURIComponent(runId)}/events`;
    void stream
      .start(key, { start: { url }, resume: () => ({ url }), terminal: TERMINAL_EVENTS, onEvent: push })
      .then(() => live && onEnd());
    return () => {
      live = false;
      stream.stop();
    };
  }, [runId, key, push, reset, stream.start, stream.stop, onEnd]);
  return [view, stream];
}

function Followed({ stream }: { stream: FollowState }) {
  return (
    <>
      <ErrorNote error={stream.error} />
      <FollowNote stream={stream} />
    </>
  );
}

function DuelReplay({ run, onEnd }: ViewerProps) {
  const { api } = useSession();
  const [view, stream] = useReplay(run.id, duelReducer, emptyDuel, onEnd);
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
  // A duel asked without rounds ran the API's default.
  const rounds = typeof run.input?.rounds === "number" ? run.input.rounds : DUEL_ROUNDS.default;
  return (
    <>
      <Followed stream={stream} />
      <DuelViewer view={view} rounds={rounds} verdicts={verdicts} />
    </>
  );
}

function TableReplay({ run, onEnd }: ViewerProps) {
  const [view, stream] = useReplay(run.id, exchangeReducer, () => emptyExchange(run.title), onEnd);
  const conversation = run.ref?.conversationId;
  return (
    <>
      <Followed stream={stream} />
      {conversation && (
        <p>
          <Link to={`/roundtable/${encodeURIComponent(String(conversation))}`}>Open the whole conversation</Link>
        </p>
      )}
      <ExchangeView exchange={{ ...view, question: run.title }} index={Number(run.ref?.exchange ?? 1) - 1} live />
    </>
  );
}

function PanelReplay({ run, onEnd }: ViewerProps) {
  const [view, stream] = useReplay(run.id, panelReducer, emptyPanel, onEnd);
  const { models } = useModels();
  return (
    <>
      <Followed stream={stream} />
      <PanelViewer view={view} familyNotes={familiesToChoose(models)} />
    </>
  );
}

function WorkflowReplay({ run, onEnd }: ViewerProps) {
  const [view, stream] = useReplay(run.id, workflowReducer, emptyWorkflowRun, onEnd);
  return (
    <>
      <Followed stream={stream} />
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

  // The run's events have ended: its record now says how (the status shown above, its usage).
  const reread = useCallback(() => {
    api<RunDetail>(`/v1/runs/${encodeURIComponent(id)}`).then(
      (r) => setRun((shown) => (shown?.id === r.id ? { ...shown, ...r } : shown)),
      () => undefined, // the replay itself is on screen; the old record stays
    );
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
          {count(run.usage?.totalTokens ?? 0, "token")}
          {paidParts(run.usage)} · {formatCost(run.usage?.costUsd)}
          {run.usage?.reasoningCostUsd ? ` (${formatCost(run.usage.reasoningCostUsd)} reasoning)` : ""}
          {run.error ? ` · ${run.error}` : ""}
        </p>
      )}
      {Viewer && run && <Viewer run={run} onEnd={reread} />}
      {run && !Viewer && <p className="error">This Studio cannot show runs of kind {run.kind}.</p>}
    </div>
  );
}
