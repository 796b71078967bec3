/**
 * Panel: ask a router's panel a question, with the router's council or one chosen for it (`CouncilPicker`). The
 * answer is requested as OpenAI-compatible streamed chat completions; the side-by-side view follows the run's own
 * events (`X-Run-Id`), which carry each panelist's answer and figures.
 */
import { useEffect, useRef, useState } from "react";

import { authHeaders, ApiError, describeError, errorMessage } from "../../api/client";
import { TERMINAL_EVENTS } from "../../api/sse";
import { ErrorNote, FollowNote } from "../../components/ui";
import { useSession } from "../../session/session";
import { emptyPanel, panelReducer } from "../../streams/panel";
import { useFollow } from "../../streams/useFollow";
import { useStreamReducer } from "../../streams/useStream";
import { councilFields, CouncilPicker, NO_COUNCIL } from "./CouncilPicker";
import { RULE_NAMES } from "./DecisionCard";
import { familiesToChoose, isRouter, ModelOptions, ModelSummary, PRESET, useModels } from "./ModelPicker";
import { PanelViewer } from "./PanelViewer";

const ANSWER_RULES = [
  ["exact", "Exact text (the default)"],
  ["number", "A number"],
  ["choice", "A choice (A, B, C, …)"],
  ["regex", "A regular expression"],
] as const;
type AnswerRuleKind = (typeof ANSWER_RULES)[number][0];

/** Split a router's `answerRule` into the picker's kind and a regex's pattern. */
function splitAnswerRule(rule: string | null | undefined): [AnswerRuleKind, string] {
  if (rule?.startsWith("regex:")) return ["regex", rule.slice("regex:".length)];
  return [rule === "number" || rule === "choice" ? rule : "exact", ""];
}

/** The request's `tools`: none for an empty field, else the field's JSON list; a message when it is not one. */
function toolsField(text: string): { tools?: unknown[] } | string {
  if (!text.trim()) return {};
  let tools: unknown;
  try {
    tools = JSON.parse(text);
  } catch {
    tools = null;
  }
  if (!Array.isArray(tools)) return "Tools must be a JSON list of OpenAI tool definitions.";
  return { tools };
}

/** What to do about a council the API refused (docs/panel.md, "Errors"), said before the API's own words. */
const REFUSALS: Record<string, string> = {
  model_unavailable: "A model of the council cannot be called here.",
  too_few_families: "The panel needs models of distinct families (or let two of one family sit).",
  invalid_arbitrator: "The judge was named twice, differently.",
  invalid_depth: "Shadow needs adaptive depth.",
  router_required: "A council needs a router: choose one as the model.",
};

/** The form's error: an API refusal with its code's advice first, the server's message, the status and code. */
function refusal(error: unknown): unknown {
  if (!(error instanceof ApiError) || error.status !== 400) return error;
  const code = (error.body as { error?: { code?: unknown } } | null)?.error?.code;
  if (typeof code !== "string") return error;
  return `${REFUSALS[code] ? `${REFUSALS[code]} ` : ""}${error.message} (HTTP 400, ${code})`;
}

/**
 * Start the completion and resolve to its run id once the response's headers arrive. The body is
 * read to its end in the background: the OpenAI stream is kept open so the request runs as a
 * client would run it, while the view draws from the run's events.
 */
async function startCompletion(key: string, body: unknown, signal: AbortSignal): Promise<string> {
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: authHeaders(key, { "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) {
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON: keep the text */
    }
    throw new ApiError(response.status, errorMessage(parsed, response.status), parsed);
  }
  const runId = response.headers.get("X-Run-Id");
  void response.body?.pipeTo(new WritableStream()).catch(() => undefined);
  if (!runId) throw new Error("The server did not name the run (no X-Run-Id header)");
  return runId;
}

export function PanelPage() {
  const { key, writes } = useSession();
  const { models, error: listError } = useModels();
  const [question, setQuestion] = useState("");
  const [model, setModel] = useState(PRESET);
  const [mode, setMode] = useState<"debate" | "panel">("debate");
  const [rule, setRule] = useState("synthesis");
  const [answerRule, setAnswerRule] = useState<AnswerRuleKind>("exact");
  const [pattern, setPattern] = useState("");
  const [seed, setSeed] = useState("");
  const [tools, setTools] = useState("");
  const [council, setCouncil] = useState(NO_COUNCIL);
  const [view, push, reset] = useStreamReducer(panelReducer, emptyPanel);
  const stream = useFollow();
  const [error, setError] = useState<unknown>(null);
  const [starting, setStarting] = useState(false);
  const request = useRef<AbortController | null>(null);

  useEffect(() => () => request.current?.abort(), []);

  const choice = models.find((m) => m.id === model);
  const router = isRouter(choice);
  const routerRule = choice?.router?.rule ?? "synthesis"; // the preset's, until the list is read
  const familyNotes = familiesToChoose(models);

  /** Choose a model; the rule and answer rule start as the router's own (a request may change them). */
  function pick(id: string) {
    setModel(id);
    const router = models.find((m) => m.id === id)?.router;
    setRule(router?.rule ?? "synthesis");
    const [kind, text] = splitAnswerRule(router?.answerRule);
    setAnswerRule(kind);
    setPattern(text);
  }

  /** The request's panel fields: the mode, and a debate's rule (with a vote's answer rule, a rank's seed). */
  function panelFields(): Record<string, unknown> | string {
    if (!router) return {}; // one model: no panel, no rule
    const chosen = councilFields(council, choice?.router ?? null, mode === "debate");
    if (typeof chosen === "string") return chosen;
    if (mode === "panel") return { panel: true, ...chosen };
    const fields: Record<string, unknown> = { debate: true, rule, ...chosen };
    if (rule === "vote") {
      if (answerRule === "regex" && !pattern.trim()) return "Write the pattern the answers are read with.";
      fields.answer_rule = answerRule === "regex" ? `regex:${pattern.trim()}` : answerRule;
    }
    if (rule === "rank" && seed.trim()) fields.seed = Number(seed);
    return fields;
  }

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    if (!question.trim()) {
      setError("Write a question first.");
      return;
    }
    const fields = panelFields();
    const offered = toolsField(tools);
    if (typeof fields === "string" || typeof offered === "string") {
      setError(typeof fields === "string" ? fields : offered);
      return;
    }
    setError(null);
    reset();
    request.current?.abort();
    request.current = new AbortController();
    const body = { model, messages: [{ role: "user", content: question.trim() }], stream: true, ...fields, ...offered };
    setStarting(true);
    let runId: string;
    try {
      runId = await startCompletion(key, body, request.current.signal);
    } catch (err) {
      setError(refusal(err));
      return;
    } finally {
      setStarting(false);
    }
    const url = `/v1/runs/${encodeURIComponent(runId)}/events`;
    void stream.start(key, { start: { url }, resume: () => ({ url }), terminal: TERMINAL_EVENTS, onEvent: push });
  }

  const busy = starting || stream.running;
  return (
    <div className="area">
      <h1>Panel</h1>
      <p className="lede">
        One question to several models at once; in debate mode a rule decides the answer: an arbitrator's synthesis,
        a majority vote, a ranking or a judge's pick.
      </p>
      {!writes("chat") && <p className="error">This key cannot ask panels: it needs the <code>chat</code> scope.</p>}
      <form className="card form-grid" onSubmit={submit} aria-label="Ask a panel">
        <label htmlFor="panel-question">Question</label>
        <textarea id="panel-question" rows={3} value={question} onChange={(e) => setQuestion(e.target.value)} />
        <label htmlFor="panel-model">Model</label>
        <div>
          <select
            id="panel-model"
            value={model}
            onChange={(e) => pick(e.target.value)}
            aria-describedby="panel-model-summary"
          >
            <ModelOptions models={models} />
          </select>
          {listError ? (
            <p className="hint">The models could not be listed ({describeError(listError)}); the preset still answers.</p>
          ) : null}
          {/* The router's arbitrator and panel: a council chosen for the question may have neither. */}
          <ModelSummary id="panel-model-summary" choice={choice}
                        familyNotes={familyNotes && council.models.length === 0 && !council.judge.trim()} />
        </div>
        {router && (
          <>
            <span id="panel-mode-label">Mode</span>
            <div role="radiogroup" aria-labelledby="panel-mode-label" className="radios">
              <label>
                <input type="radio" name="panel-mode" checked={mode === "debate"} onChange={() => setMode("debate")} />{" "}
                Debate: one answer, decided by a rule
              </label>
              <label>
                <input type="radio" name="panel-mode" checked={mode === "panel"} onChange={() => setMode("panel")} />{" "}
                Panel: every answer, labelled
              </label>
            </div>
          </>
        )}
        {router && mode === "debate" && (
          <>
            <label htmlFor="panel-rule">Decision rule</label>
            <select id="panel-rule" value={rule} onChange={(e) => setRule(e.target.value)}>
              {Object.entries(RULE_NAMES).map(([value, name]) => (
                <option key={value} value={value}>
                  {name}
                  {value === routerRule ? " (the router's)" : ""}
                </option>
              ))}
            </select>
          </>
        )}
        {router && mode === "debate" && rule === "vote" && (
          <>
            <label htmlFor="panel-answer-rule">Answer rule</label>
            <div className="inline-form">
              <select
                id="panel-answer-rule"
                value={answerRule}
                onChange={(e) => setAnswerRule(e.target.value as AnswerRuleKind)}
              >
                {ANSWER_RULES.map(([value, name]) => (
                  <option key={value} value={value}>
                    {name}
                  </option>
                ))}
              </select>
              {answerRule === "regex" && (
                <input
                  aria-label="Pattern"
                  placeholder="Answer: (\w+)"
                  value={pattern}
                  onChange={(e) => setPattern(e.target.value)}
                />
              )}
            </div>
          </>
        )}
        {router && mode === "debate" && rule === "rank" && (
          <>
            <label htmlFor="panel-seed">Seed</label>
            <div>
              <input
                id="panel-seed"
                type="number"
                step={1}
                value={seed}
                onChange={(e) => setSeed(e.target.value)}
                aria-describedby="panel-seed-hint"
              />
              <p className="hint" id="panel-seed-hint">
                Seeds each reviewer's order of the answers; left empty, the question seeds it.
              </p>
            </div>
          </>
        )}
        {router && (
          <CouncilPicker
            models={models}
            router={choice?.router ?? null}
            debate={mode === "debate"}
            council={council}
            onChange={setCouncil}
          />
        )}
        <label htmlFor="panel-tools">Tools (JSON)</label>
        <div>
          <textarea
            id="panel-tools"
            rows={2}
            className="mono"
            value={tools}
            onChange={(e) => setTools(e.target.value)}
            aria-describedby="panel-tools-hint"
          />
          <p className="hint" id="panel-tools-hint">
            Optional: OpenAI function tools, <code>{'[{"type": "function", "function": {"name": …}}]'}</code>. A
            debate's arbitrator may answer by calling one; the panelists read them and propose.
          </p>
        </div>
        <span />
        <div className="actions">
          <button type="submit" disabled={busy || !writes("chat")}>
            {busy ? "Asking…" : "Ask the panel"}
          </button>
        </div>
      </form>
      <ErrorNote error={error ?? stream.error} />
      <FollowNote stream={stream} />
      {(busy || view.seats.length > 0 || view.status !== "waiting") && <PanelViewer view={view} familyNotes={familyNotes} />}
    </div>
  );
}
