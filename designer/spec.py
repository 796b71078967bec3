"""The workflow format (version 1): a pydantic `WorkflowSpec` and its JSON Schema for editors.

A workflow declares its state keys, its nodes (each with a type, a config, input templates over state
keys and the key it writes) and the edges between them. `designer.compile_workflow` turns one into a
LangGraph graph; this module only says what a well-formed document looks like.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from parley.core.fields import ModelId
from parley.core.limits import (
    DEFAULT_PANEL_SIZE,
    DUEL_CONCLUSION_MAX_CHARS,
    MAX_FAN_OUT_BRANCHES,
    MAX_DUEL_ROUNDS,
    MAX_NODE_RETRIES,
    MAX_WORKFLOW_NODES,
    MAX_WORKFLOW_ROUTES,
    MAX_PANEL_SIZE,
    MIN_DUEL_ROUNDS,
    MIN_PANEL_SIZE,
)

SPEC_VERSION = 1
END = "__end__"
NODE_ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]*$"
STATE_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

StateType = Literal["string", "number", "integer", "boolean", "object", "array", "any"]
Op = Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "not_in", "contains", "not_contains", "matches",
             "truthy", "falsy"]
UNARY_OPS = ("truthy", "falsy")
NodeId = Annotated[str, StringConstraints(pattern=NODE_ID_PATTERN), Field(description="A node id.")]
StateKeyName = Annotated[str, StringConstraints(pattern=STATE_KEY_PATTERN)]
StatePath = Annotated[str, Field(description="A state key, or a dotted path into one: `outcome.synthesis.winner`.")]
Template = Annotated[str, Field(description="Text with `{key}` or `{key.field}` placeholders over state keys.")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --- state ----------------------------------------------------------------------------------


class StateKey(_Strict):
    """One declared state key."""

    type: StateType = Field("any", description="JSON type of the value; `any` accepts everything.")
    default: Any = Field(None, description="Value the key holds until a node writes it (omit for none).")
    required: bool = Field(False, description="A run must pass this key in its input.")
    reducer: Literal["replace", "append"] = Field(
        "replace",
        description="`replace`: a write replaces the value. `append` (arrays): each write adds one item, so "
        "loops and parallel branches can collect into one list.",
    )
    description: str | None = Field(None, description="What the key holds.")

    @property
    def has_default(self) -> bool:
        return "default" in self.model_fields_set


# --- routing --------------------------------------------------------------------------------


class Predicate(_Strict):
    """A test on one state value."""

    key: StatePath
    op: Op = Field("eq", description="How to compare the value with `value`; `matches` is a regex search.")
    value: Any = Field(None, description="What to compare with (a list for `in`/`not_in`; unused by truthy/falsy).")


class Case(_Strict):
    """One branch of a condition node: taken when the node's key passes `op` against `value`."""

    op: Op = "eq"
    value: Any = None
    goto: str = Field(..., description=f"The node to run next, or `{END}` to finish.")


class Edge(_Strict):
    """`from` → `to`. With `when`, the edge is taken only if the test passes (first passing edge of a node
    wins; that node's plain edges become the fallback, and with none the run finishes)."""

    source: str = Field(..., alias="from", description="The node the edge leaves.")
    target: str = Field(..., alias="to", description=f"The node it enters, or `{END}`.")
    when: Predicate | None = Field(None, description="Take this edge only when the test passes.")


# --- node types -----------------------------------------------------------------------------


class _Node(_Strict):
    id: NodeId
    description: str | None = Field(None, description="What the node is for.")
    output_key: str | None = Field(None, description="The declared state key the node writes.")
    retries: int = Field(0, ge=0, le=MAX_NODE_RETRIES, description="Extra attempts after a transient model failure.")

    # The JSON type of what the node writes, for checking against the declared type of its output key.
    writes: ClassVar[str] = "any"
    # Whether a node of this type must name an output key.
    needs_output: ClassVar[bool] = True

    def output_type(self) -> str:
        return self.writes

    def models(self) -> list[str]:
        """The model ids the node's config names (to start the embedded model when one is local)."""
        config = getattr(self, "config", None)
        found = [getattr(config, "model", None)] + list(getattr(config, "models", None) or [])
        found += list(getattr(config, "arbitrators", None) or [])
        agents = getattr(config, "agents", None)
        if isinstance(agents, list):
            found += [agent.model for agent in agents]
        return [m for m in found if m]


class LlmConfig(_Strict):
    model: ModelId | None = Field(None, description="`provider:model`; the run's default model when omitted.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Output cap.")
    output_schema: dict[str, Any] | None = Field(
        None,
        description="A JSON Schema object (`properties` of string, number, integer, boolean, enum, array and "
        "nested object types); the answer is then that object instead of streamed text.",
    )


class LlmInputs(_Strict):
    prompt: Template = Field(..., description="The user message.")
    system: Template | None = Field(None, description="An optional system message.")


class LlmNode(_Node):
    """Ask one model; streams its tokens, or answers an object when `config.output_schema` is set."""

    type: Literal["llm"]
    config: LlmConfig = Field(default_factory=LlmConfig)
    inputs: LlmInputs

    def output_type(self) -> str:
        return "object" if self.config.output_schema else "string"


class PickConfig(_Strict):
    op: Literal["pick"]
    key: StatePath = Field(..., description="The value to copy.")


class JoinConfig(_Strict):
    op: Literal["join"]
    keys: list[StatePath] = Field(..., min_length=1, description="Values to join; lists are joined item by item.")
    field: str | None = Field(None, description="For lists of objects: join this field of each item.")
    separator: str = Field("\n\n", description="Put between the joined items.")


class FormatConfig(_Strict):
    op: Literal["format"]


class TransformInputs(_Strict):
    template: Template | None = Field(None, description="For `format`: the text to fill.")


class TransformNode(_Node):
    """Pick a value, join values into text, or fill a template; no model is called."""

    type: Literal["transform"]
    config: Annotated[PickConfig | JoinConfig | FormatConfig, Field(discriminator="op")]
    inputs: TransformInputs = Field(default_factory=TransformInputs)

    def output_type(self) -> str:
        return "any" if self.config.op == "pick" else "string"


class ConditionConfig(_Strict):
    key: StatePath = Field(..., description="The state value to route on.")
    cases: list[Case] = Field(..., min_length=1, max_length=MAX_WORKFLOW_ROUTES,
                              description="Tried in order; the first that passes is taken.")
    default: str = Field(END, description=f"The node to run when no case passes (`{END}` finishes).")


class NoInputs(_Strict):
    pass


class ConditionNode(_Node):
    """Route on a state value; writes the chosen node id to `output_key` when one is given."""

    type: Literal["condition"]
    config: ConditionConfig
    inputs: NoInputs = Field(default_factory=NoInputs)

    writes: ClassVar[str] = "string"
    needs_output: ClassVar[bool] = False


class PanelConfig(_Strict):
    models: list[ModelId] | None = Field(
        None, description="Panelist candidates (`provider:model`); the `router/debate` preset's when omitted."
    )
    panel_size: int = Field(DEFAULT_PANEL_SIZE, ge=MIN_PANEL_SIZE, le=MAX_PANEL_SIZE,
                            description="Panelists of distinct families.")
    allow_same_family: bool | None = Field(
        None,
        description="Fill seats the models' families cannot by sampling them again (self-consistency); "
        "when omitted, the preset's choice if `models` is omitted, else off.",
    )
    system_prompt: str | None = Field(None, description="Sent to every panelist.")


class DebateConfig(PanelConfig):
    """A panel's configuration plus its arbitrator's and its decision rule."""

    arbitrators: list[ModelId] | None = Field(None, description="Arbitrator candidates, in order of preference.")
    arbitrator_prompt: str | None = Field(None, description="Instructions for the arbitrator.")
    rule: Literal["synthesis", "vote", "rank", "best-of-n"] = Field(
        "synthesis", description="How the panel decides: `synthesis` (the arbitrator writes the answer), `vote` (the "
        "majority under `answer_rule`), `rank` (the panelists rank each other's answers, Borda count; 3 panelists "
        "or more) or `best-of-n` (a judge picks one, in both reading orders). A rule's tie goes to the arbitrator.")
    answer_rule: str | None = Field(
        None, description="How `vote` reads an answer: `number`, `choice`, `exact` (the default) or "
        "`regex:<pattern>` (as the `vote` node's `rule`).")


class PanelInputs(_Strict):
    input: Template = Field("{input}", description="What the panel is asked.")


class DebateNode(_Node):
    """Send the input to a panel of distinct-family models; the arbitrator writes the best answer (or the panel
    decides by another `rule`)."""

    type: Literal["debate"]
    config: DebateConfig = Field(default_factory=DebateConfig)
    inputs: PanelInputs = Field(default_factory=PanelInputs)

    writes: ClassVar[str] = "string"


class PanelNode(_Node):
    """Send the input to a panel of distinct-family models and write their answers, each labelled."""

    type: Literal["panel"]
    config: PanelConfig = Field(default_factory=PanelConfig)
    inputs: PanelInputs = Field(default_factory=PanelInputs)

    writes: ClassVar[str] = "string"


class DuelConfig(_Strict):
    rounds: int | None = Field(None, ge=MIN_DUEL_ROUNDS, le=MAX_DUEL_ROUNDS,
                               description="Exchanges; the duel's default when omitted.")
    user_profile: dict[str, Any] | None = Field(
        None, description="The persona arguing your side (`name`, `bio`, …) when `inputs.user_profile` is not set."
    )
    model: ModelId | None = Field(None, description="Model for every call of the duel.")
    options: dict[str, Any] = Field(default_factory=dict, description="Fields of the duel's run context.")


class DuelInputs(_Strict):
    topic: Template = Field("{topic}", description="What the duel is about.")
    user_profile: Template | None = Field(None, description="A placeholder for an object key, e.g. `{profile}`.")
    rounds: Template | None = Field(None, description="A placeholder for an integer key, e.g. `{rounds}`.")


class DuelNode(_Node):
    """Stage a duel; writes `{opponent_profile, messages, synthesis, winner_argument}`."""

    type: Literal["duel"]
    config: DuelConfig = Field(default_factory=DuelConfig)
    inputs: DuelInputs = Field(default_factory=DuelInputs)

    writes: ClassVar[str] = "object"


class AgentSpec(_Strict):
    """A persona seated at a round table."""

    id: str | None = Field(None, description="Stable id; derived from the position when omitted.")
    name: str = Field(..., min_length=1)
    role: str = ""
    persona: str = ""
    model: ModelId | None = None
    isDevilsAdvocate: bool = False
    memories: list[Any] = Field(default_factory=list)
    documents: list[Any] = Field(default_factory=list)


class RoundtableConfig(_Strict):
    agents: list[AgentSpec] | Literal["workspace"] = Field(
        ...,
        description="The table, inline; or `workspace`: the caller's workspace agents (HTTP runs only; "
        "a Python caller passes them as `WorkflowContext(workspace_agents=...)`).",
    )
    model: ModelId | None = Field(None, description="Model for agents that name none, and for the synthesis.")
    options: dict[str, Any] = Field(default_factory=dict, description="Fields of the round table's run context.")


class RoundtableInputs(_Strict):
    question: Template = Field("{question}", description="The question put to the table.")
    topic: Template | None = Field(None, description="The decision at stake, when it differs from the question.")


class RoundtableNode(_Node):
    """Put a question to a round table; writes `{synthesis, total_rounds, rounds, transcript}`."""

    type: Literal["roundtable"]
    config: RoundtableConfig
    inputs: RoundtableInputs = Field(default_factory=RoundtableInputs)

    writes: ClassVar[str] = "object"


# --- capability node types (the parts the modes are built of) --------------------------------


class SelectOpponentConfig(_Strict):
    model: ModelId | None = Field(None, description="`provider:model`; the run's default model when omitted.")
    temperature: float | None = Field(0.8, ge=0, le=2, description="Sampling temperature (the duel's by default).")
    user_profile: dict[str, Any] | None = Field(
        None, description="The user (`name`, `bio`, `softMemory`) when `inputs.user_profile` is not set."
    )


class SelectOpponentInputs(_Strict):
    topic: Template = Field("{topic}", description="What the opponent will argue about.")
    user_profile: Template | None = Field(None, description="A placeholder for an object key, e.g. `{profile}`.")


class SelectOpponentNode(_Node):
    """Cast an opponent for the topic, opposed to the user's likely stance (the duel's `select_opponent`); a
    built-in persona when the model cannot. Writes `{name, title, bio, stance, traits}`."""

    type: Literal["select_opponent"]
    config: SelectOpponentConfig = Field(default_factory=SelectOpponentConfig)
    inputs: SelectOpponentInputs = Field(default_factory=SelectOpponentInputs)

    writes: ClassVar[str] = "object"


class SynthesizeConfig(_Strict):
    model: ModelId | None = Field(None, description="`provider:model`; the run's default model when omitted.")
    temperature: float | None = Field(0.2, ge=0, le=2, description="Sampling temperature.")
    output_schema: dict[str, Any] = Field(
        ..., description="A JSON Schema object (as `llm`'s `output_schema`): the synthesis's shape."
    )
    fallback: dict[str, Any] | None = Field(
        None,
        description="Written instead when the answer cannot be read (after the node's retries); when omitted, "
        "an unreadable answer fails the node.",
    )


class SynthesizeNode(_Node):
    """Write a structured synthesis (the round table's `synthesize`), or `config.fallback` when the model's
    answer cannot be read."""

    type: Literal["synthesize"]
    config: SynthesizeConfig
    inputs: LlmInputs

    writes: ClassVar[str] = "object"


class ScoreConvergenceConfig(_Strict):
    threshold: float = Field(0.85, ge=0, le=1, description="The score at which the table counts as converged.")


class ScoreConvergenceInputs(_Strict):
    transcript: Template = Field(
        "{transcript}",
        description="A placeholder for a list of messages `{agentId, roundNumber, stance, confidence, keyPoint}`, "
        "e.g. a round table's `{outcome.transcript}`.",
    )
    round: Template | None = Field(
        None, description="A placeholder for the round to score (an integer); the transcript's last when omitted."
    )


class ScoreConvergenceNode(_Node):
    """Score how far a table's stated positions agree and have stopped moving (the round table's
    `score_convergence`); no model is called. Writes `{roundNumber, convergenceScore, converged, usage}`."""

    type: Literal["score_convergence"]
    config: ScoreConvergenceConfig = Field(default_factory=ScoreConvergenceConfig)
    inputs: ScoreConvergenceInputs = Field(default_factory=ScoreConvergenceInputs)

    writes: ClassVar[str] = "object"


class FanOutConfig(_Strict):
    branches: int | None = Field(
        None, ge=1, le=MAX_FAN_OUT_BRANCHES,
        description="Parallel calls; one per entry of `models` when omitted (then `models` is required).",
    )
    models: list[ModelId] | None = Field(
        None, min_length=1, description="`provider:model` ids dealt to the branches in turn (branch i gets "
        "`models[i % len]`); `model` for every branch when omitted.",
    )
    model: ModelId | None = Field(None, description="`provider:model` of every branch; the run's default when omitted.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature of every branch.")
    max_tokens: int | None = Field(None, gt=0, description="Output cap of every branch.")
    timeout: float | None = Field(None, gt=0, description="Wall-clock seconds of one branch's attempt.")
    min_successes: int | None = Field(
        None, ge=1, le=MAX_FAN_OUT_BRANCHES,
        description="Branches that must answer. When set, a branch whose model fails is recorded (`success: "
        "false`) and the others go on; when omitted, every branch must answer.",
    )
    revise_prompt: str | None = Field(
        None, description="With `inputs.previous`: the revision request, with `{answers}` (the others' answers) "
        "and `{question}` (the rendered prompt); the multi-agent debate's when omitted.",
    )


class FanOutInputs(_Strict):
    prompt: Template = Field(..., description="The user message every branch is asked.")
    system: Template | None = Field(None, description="An optional system message.")
    previous: Template | None = Field(
        None, description="A placeholder for the list an earlier fan_out wrote, e.g. `{first}`: each branch then "
        "sees its own answer there and revises it after reading the others' (Du et al.'s debate round).",
    )


class FanOutNode(_Node):
    """Ask N models at once (LangGraph `Send`, one branch each), with a per-branch timeout and a minimum of
    answers. Writes the answers in branch order: `[{branch, model, content}]` (`success: false`, `error`,
    `detail` for a branch that failed)."""

    type: Literal["fan_out"]
    config: FanOutConfig = Field(default_factory=FanOutConfig)
    inputs: FanOutInputs

    writes: ClassVar[str] = "array"

    def branch_count(self) -> int:
        return self.config.branches or len(self.config.models or [])


class ArbitrateConfig(_Strict):
    arbitrators: list[ModelId] | None = Field(
        None, min_length=1, description="The fallback chain (`provider:model`), asked in order until one answers; "
        "the run's default model when omitted.",
    )
    prompt: str | None = Field(None, description="Instructions replacing the arbitrator's own.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Output cap.")
    timeout: float | None = Field(None, gt=0, description="Seconds one candidate may take.")


class ArbitrateInputs(_Strict):
    question: Template = Field("{question}", description="What the answers answer.")
    answers: Template = Field(..., description="A placeholder for a list of answers (texts, or a fan_out's "
                                               "results), e.g. `{answers}`.")
    system: Template | None = Field(None, description="The caller's instructions the answers were given under.")


class ArbitrateNode(_Node):
    """Write the best answer from several, shown to an arbitrator anonymised as Answer A, B, C (the panel's
    `arbitrate`); each candidate of the fallback chain is asked in turn until one answers. Streams it."""

    type: Literal["arbitrate"]
    config: ArbitrateConfig = Field(default_factory=ArbitrateConfig)
    inputs: ArbitrateInputs

    writes: ClassVar[str] = "string"


class JudgeConfig(_Strict):
    model: ModelId | None = Field(None, description="`provider:model`; the run's default model when omitted.")
    temperature: float | None = Field(0.3, ge=0, le=2, description="Sampling temperature (the duel's by default).")
    conclusion_max_chars: int = Field(DUEL_CONCLUSION_MAX_CHARS, ge=1, description="The conclusion's length cap.")


class JudgeInputs(_Strict):
    topic: Template = Field("{topic}", description="What was debated.")
    messages: Template = Field(
        "{messages}", description="A placeholder for the two-sided transcript `[{role: user|opponent, content}]`, "
        "one turn each per round, e.g. a duel's `{outcome.messages}`.",
    )
    user_profile: Template | None = Field(None, description="A placeholder for the `user` side's profile or name.")
    opponent_profile: Template | None = Field(None, description="A placeholder for the `opponent` side's profile "
                                                                "or name.")


class JudgeNode(_Node):
    """Judge a two-sided debate twice, the speakers' order swapped, anonymised (the duel's `judge`). Writes
    `{winner, verdicts}`: `winner` (`user`, `opponent` or `tie`) is the one both verdicts named, else a tie."""

    type: Literal["judge"]
    config: JudgeConfig = Field(default_factory=JudgeConfig)
    inputs: JudgeInputs = Field(default_factory=JudgeInputs)

    writes: ClassVar[str] = "object"


class VoteConfig(_Strict):
    rule: str = Field("exact", description="How an answer is read: `number`, `choice`, `exact` or "
                                           "`regex:<pattern>` (as `parley eval --rule`).")


class VoteInputs(_Strict):
    answers: Template = Field(..., description="A placeholder for a list of answers (texts, or a fan_out's "
                                               "results), e.g. `{answers}`.")
    rule: Template | None = Field(None, description="A placeholder for the rule's name, e.g. `{rule}`; "
                                                    "`config.rule` when omitted.")


class VoteNode(_Node):
    """Take the majority of several answers, each read by an answer rule (a tie goes to the earliest); no model
    is called. Writes the first answer read as the winner (the first answer when none can be read)."""

    type: Literal["vote"]
    config: VoteConfig = Field(default_factory=VoteConfig)
    inputs: VoteInputs

    writes: ClassVar[str] = "string"


# The state keys `await` nodes write (`nodes.steer.SteerState`): a workflow with one may not declare them.
STEER_KEYS = ("human", "consumed", "stopped_by", "passed", "mark")


class AwaitConfig(_Strict):
    wait: Literal["always", "on_request"] = Field(
        "always", description="`always`: the run waits here for a person every time it passes (status `waiting`, "
        "until `continue`, `guide` or `end`); `on_request`: only after a `pause` was sent. Either way the messages "
        "sent since the last await node are taken in here.")
    on_end: str | None = Field(
        None, description=f"Where the run goes when the person sends `end`, or when its budget holds no more steps: "
                          f"a node id (a summary, say), or `{END}` to finish (the default).")


class AwaitNode(_Node):
    """A boundary where a person steers the run (`POST /v1/runs/{id}/input`, docs/steering.md): it takes in the
    messages they sent (written to `output_key`, a list of texts, when given), waits for them when told to, and
    goes to `on_end` on `end` or when the run's budget holds no more steps (`nodes.steer`). No model is called."""

    type: Literal["await"]
    config: AwaitConfig = Field(default_factory=AwaitConfig)
    inputs: NoInputs = Field(default_factory=NoInputs)

    writes: ClassVar[str] = "array"
    needs_output: ClassVar[bool] = False


NODE_TYPES: dict[str, type[_Node]] = {
    "llm": LlmNode,
    "transform": TransformNode,
    "condition": ConditionNode,
    "debate": DebateNode,
    "panel": PanelNode,
    "duel": DuelNode,
    "roundtable": RoundtableNode,
    "select_opponent": SelectOpponentNode,
    "synthesize": SynthesizeNode,
    "score_convergence": ScoreConvergenceNode,
    "fan_out": FanOutNode,
    "arbitrate": ArbitrateNode,
    "judge": JudgeNode,
    "vote": VoteNode,
    "await": AwaitNode,
}
MODE_NODE_TYPES = ("debate", "panel", "duel", "roundtable")
CAPABILITY_NODE_TYPES = ("select_opponent", "synthesize", "score_convergence", "fan_out", "arbitrate", "judge", "vote",
                         "await")

Node = Annotated[
    LlmNode | TransformNode | ConditionNode | DebateNode | PanelNode | DuelNode | RoundtableNode
    | SelectOpponentNode | SynthesizeNode | ScoreConvergenceNode | FanOutNode | ArbitrateNode | JudgeNode | VoteNode
    | AwaitNode,
    Field(discriminator="type"),
]


# --- the workflow ---------------------------------------------------------------------------


class WorkflowSpec(_Strict):
    """A workflow: declared state, nodes, edges, where it starts and where it finishes."""

    schema_ref: str | None = Field(None, alias="$schema", description="Where editors find this schema.")
    version: Literal[1] = Field(SPEC_VERSION, description="Version of the workflow format.")
    name: str = Field(..., min_length=1, description="Shown in lists; also the compiled graph's name.")
    description: str = Field("", description="What the workflow does.")
    state: dict[StateKeyName, StateKey] = Field(
        default_factory=dict, description="The declared state keys.",
        json_schema_extra={"additionalProperties": False},  # names outside the pattern are errors, not extras
    )
    nodes: list[Node] = Field(..., min_length=1, max_length=MAX_WORKFLOW_NODES)
    edges: list[Edge] = Field(default_factory=list, max_length=MAX_WORKFLOW_ROUTES)
    entry: str = Field(..., description="The node that runs first.")
    finish: list[str] = Field(default_factory=list, description="Nodes after which the run finishes.")
    sample_input: dict[str, Any] | None = Field(
        None, alias="sampleInput", description="An input the workflow runs with as-is (examples, editors)."
    )

    def node(self, node_id: str) -> _Node | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    @property
    def defaults(self) -> dict[str, Any]:
        return {k: v.default for k, v in self.state.items() if v.has_default}

    def models(self) -> list[str]:
        """Every model id the nodes name."""
        return [m for node in self.nodes for m in node.models()]

    @property
    def steerable(self) -> bool:
        """Whether a person may steer its runs: it has an `await` node."""
        return any(isinstance(node, AwaitNode) for node in self.nodes)

    def dump(self) -> dict[str, Any]:
        """The spec as JSON-ready data, with its wire names (`from`, `sampleInput`)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def workflow_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a workflow document."""
    schema = WorkflowSpec.model_json_schema(by_alias=True)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"Parley workflow (version {SPEC_VERSION})",
        **{k: v for k, v in schema.items() if k != "title"},
    }


# --- bundled examples -----------------------------------------------------------------------


def example_files() -> dict[str, Path]:
    """The bundled example workflows, by name (file name without `.json`)."""
    folder = resources.files("parley.designer") / "examples"
    return {Path(p.name).stem: Path(str(p)) for p in sorted(folder.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".json")}


def load_example(name: str) -> dict[str, Any]:
    """Read a bundled example workflow as a dict."""
    files = example_files()
    if name not in files:
        raise KeyError(f"no example '{name}'; there are: {', '.join(files)}")
    return json.loads(files[name].read_text())
