"""What Parley accepts: sizes, depths and counts every request is held to, and the bounds of each mode, in one place.

The HTTP layer checks the first once, where every request enters (`api/entry.py`), so no route can forget one;
the values MongoDB itself imposes (64-bit integers, UTF-8 strings, NUL-free keys) are checked here too, so
a body Parley accepts is a body it can store. The modes' bounds (panel seats, rounds, turn lengths, a workflow
node's retries) are read from here by the graphs and nodes that keep them, the HTTP models (and so the OpenAPI
document), the designer's workflow schema and the CLI's options, so that all of them say the same.
"""

from __future__ import annotations

from dataclasses import dataclass

# The largest request body any route reads (the duel's own, smaller limit is its contract's). A setting may lower or
# raise it: PARLEY_MAX_BODY_BYTES.
MAX_BODY_BYTES = 4 * 1024 * 1024
# Routes held to less: path → bytes. The duel contract caps its body at 24 KB.
ROUTE_BODY_BYTES = {"/api/debate": 24 * 1024}
# Nesting of objects and arrays in a JSON body. A workflow or a response_format schema nests a dozen levels;
# Python's own parser gives up near a thousand, and walking deeper documents costs the whole server.
MAX_JSON_DEPTH = 64
# Bodies from this size up are parsed and checked on a worker thread, so one large request does not hold up the
# event loop that serves every other.
OFF_LOOP_BYTES = 64 * 1024
# Conversations from this many messages up are turned into LangChain messages, counted and made into each model
# request on a worker thread: that is Python work per message (5-20 µs a step), long enough to hold the loop.
OFF_LOOP_MESSAGES = 128
# The longest a streamed answer holds the event loop while it takes chunks that were read already (seconds): past it,
# the other runs' streams have the loop (`nodes.speak`).
STREAM_FAIR_SHARE = 0.005
# Messages in one chat completion (OpenAI sets none; 60,000 one-word messages froze the server) and characters of
# all their text together.
MAX_CHAT_MESSAGES = 2048
# What is read of a request to tell a chat app's own housekeeping (a title, tags, follow-ups: `services.chat_apps`):
# the first characters of its last user message and of its system message, and the characters of a `metadata.task`.
# Every default template Parley knows puts its marks well inside this (Open WebUI's longest, autocompletion, its
# `<chat_history>` near character 1,600; its tool selection puts the tools' descriptions before its own words); a
# conversation pasted into a message is never read past it.
HOUSEKEEPING_SCAN_CHARS = 8_000
HOUSEKEEPING_TASK_MAX_CHARS = 64
# Function tools one chat completion may offer (OpenAI's own limit), and the characters of a tool's or a response
# format's name (OpenAI's `^[A-Za-z0-9_-]{1,64}$`).
MAX_TOOLS = 128
MAX_TOOL_NAME_CHARS = 64
# What one JSON Schema a request carries (a `response_format`'s, a tool's `parameters`) may hold: subschemas (every
# object in it), properties and enum values over all of it (OpenAI's structured outputs allow 5,000 and 1,000), the
# characters of one `pattern` (matched by a regex engine without backtracking, `llm.formats`). Checked off the
# event loop, before any model call.
MAX_SCHEMA_SUBSCHEMAS = 10_000
MAX_SCHEMA_PROPERTIES = 5_000
MAX_SCHEMA_ENUM_VALUES = 1_000
MAX_PATTERN_CHARS = 1_000
# A designer workflow's nodes, and its routes (its edges and condition cases), checked before its document is
# parsed (a 24,000-node workflow took 8 s to check, and a chain of 1,000 takes 0.03 s): far beyond any workflow
# a person draws.
MAX_WORKFLOW_NODES = 1_000
MAX_WORKFLOW_ROUTES = 4_000
# Lists a route's body may hold, checked where the body enters (before any model of it is built): path → field →
# most items.
ROUTE_LIST_ITEMS = {"/v1/chat/completions": {"messages": MAX_CHAT_MESSAGES, "tools": MAX_TOOLS},
                    "/v1/responses": {"input": MAX_CHAT_MESSAGES, "tools": MAX_TOOLS}}
# The Responses API (`POST /v1/responses`): a stored response (`store: true`, the default) can be read back and
# continued (`previous_response_id`) for this many days after the last response continuing it, as OpenAI keeps
# them, then it is deleted (a TTL index). A conversation continued that way is held to what one request could send:
# `MAX_CHAT_MESSAGES` items, and this many bytes of JSON (a stored response keeps only its own turn; the
# conversation is read back from its chain, and a run holds it whole in memory only).
RESPONSE_TTL_DAYS = 30
MAX_RESPONSE_CONVERSATION_BYTES = 4 * 1024 * 1024
# What one workspace's stored responses may hold in all, by default (`PARLEY_WORKSPACE_MAX_STORED_BYTES`): past it a
# response to store is refused (413 `storage_quota_exceeded`); deleting responses, or their expiry, makes room.
WORKSPACE_MAX_STORED_BYTES = 1024**3
# The count of those bytes is not lowered by expiry: a request it would refuse counts them again from the live
# responses first, at most once in this many seconds per workspace (a client refused in a loop cannot make the
# database sum a workspace's responses at each request).
STORED_BYTES_RECOUNT_SECONDS = 60
# A response's `metadata`, as OpenAI takes it: keys, the characters of a key and of a value.
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
# Integers MongoDB can hold (BSON int64), and so the largest page number, event id or count a request may name.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# An event id is a non-negative integer below 2**63: at most 19 digits (checked before converting).
MAX_EVENT_ID_DIGITS = 19
# The highest 1-based page number a listing accepts (its offset must stay a 64-bit integer).
MAX_PAGE = 10**9

# --- the modes' bounds -------------------------------------------------------------------------------------------

# Panelists of one panel: chat-completion debates and panels (a router's `panelSize`), the designer's `panel` and
# `debate` nodes, `parley panel` and `parley eval`'s panel. The panel contract fixes 3; a router (or a request's own
# `models`, a council chosen per request) may seat 2 to 8. A panel needs this many answers (or all of them, when it
# is smaller) to go on.
MIN_PANEL_SIZE, MAX_PANEL_SIZE = 2, 8
DEFAULT_PANEL_SIZE = 3
DEFAULT_MIN_SUCCESSES = 2
# What a debate's judge weighs (a request's `criteria`, shown to its arbitrator and judges), in characters; and the
# characters of any model id a request or a stored router names (`core.fields.ModelId`: a chat completion's or a
# response's `model`, a council's `models` and `arbitrator`, a router's seats, a workflow node's, an agent's, the
# CLI's): ids run to about 60, and a request's `model` is echoed in every chunk of its stream.
MAX_CRITERIA_CHARS = 2000
MAX_MODEL_ID_CHARS = 200
# A router's fallback list of models, and the routers one workspace stores (`POST /v1/routers`: 400
# `too_many_routers` past it). Every router is a model of `/v1/models`, which lists its models too: with model ids
# bounded (`MAX_MODEL_ID_CHARS`), what `/v1/models` answers any key is bounded (about 1.5 MB at the worst).
MAX_ROUTER_MODELS = 32
MAX_ROUTERS = 64
# Adaptive depth (`depth: "adaptive"`): the seats asked first (of distinct families), and the agreement of their
# answers (`nodes.analysis.agreement`, 0 to 1) from which the rest of the panel is not asked.
ADAPTIVE_FIRST_SEATS = 2
ADAPTIVE_AGREEMENT = 0.6
# Quorum grace (`quorum: {k, grace}`): the longest a panel waits, once k panelists have answered, for the others.
MAX_QUORUM_GRACE_SECONDS = 300.0
# The embedded model's prompt cache (llama-cpp-python's `--cache`, in RAM): the model state after each prompt it
# answered, so a seat's next call reads only what its prompt adds (each seat's prompt repeats its previous one,
# `nodes.prefix`). A state of SmolLM2-135M is about 23 KB a token: 512 MiB holds a round table's seats and more.
# The bytes it really holds (`core.llama_cache.PromptCache`): the server stays under 1 GB (bench/embedded_memory.py).
EMBEDDED_PROMPT_CACHE_BYTES = 512 * 1024 * 1024

# A duel's rounds (one turn each side): `rounds` of `POST /api/debate`, the designer's `duel` node, `parley duel`.
MIN_DUEL_ROUNDS, MAX_DUEL_ROUNDS = 1, 10
DEFAULT_DUEL_ROUNDS = 5
# A duel turn's length in characters, and its conclusion's (the duel contract's "100-200 characters").
DUEL_TURN_MIN_CHARS, DUEL_TURN_MAX_CHARS = 100, 200
DUEL_CONCLUSION_MAX_CHARS = 100
# What a duel's body may hold (`POST /api/debate`): the topic, the persona's name and bio, and its soft memory's lists.
DUEL_TOPIC_MAX_CHARS = 2000
PROFILE_NAME_MAX_CHARS = 100
PROFILE_BIO_MAX_CHARS = 2000
PROFILE_LIST_MAX_ITEMS = 50
# The round table: regular agents seated (the devil's advocate sits besides) and debate rounds after round 0.
MAX_TABLE_SEATS = 5
MAX_TABLE_ROUNDS = 3
# Extra attempts of one designer workflow node after a transient model failure.
MAX_NODE_RETRIES = 5

# The longest a model endpoint's `Retry-After` (on a 429) holds this worker's next calls to it (`llm.endpoints`).
MAX_RETRY_AFTER_SECONDS = 60.0

# Tools an agent calls during its turn (`nodes/tools.py`): calls one turn may make (the model's answer after the
# last is asked without tools), seconds one call may take (connecting to its MCP server included), characters of a
# result the model reads back (the rest is cut, and the result says so).
MAX_TOOL_CALLS_PER_TURN = 4
TOOL_CALL_TIMEOUT_SECONDS = 20.0
MAX_TOOL_RESULT_CHARS = 4000
# Bytes Parley reads of one answer from a tool's server (`llm/mcp.py`): an HTTP response's body, a stdio server's line.
# Past it the call fails with a tool error the model reads, and the rest is not read.
MAX_TOOL_ANSWER_BYTES = 1024 * 1024
# Seconds a stdio server has to exit once its input is closed, and its process group once sent SIGTERM, before
# SIGKILL: every process a call started ends with the call.
TOOL_SERVER_STOP_SECONDS = 2.0
# MCP servers a workspace registers (`/v1/tools`), the tools one server allows, the tools one subject is granted.
MAX_TOOL_SERVERS = 20
MAX_SERVER_TOOLS = 64
MAX_GRANTED_TOOLS = 16
# Signed webhooks (`services/webhooks.py`): subscriptions a workspace holds, and the characters of a receiver's URL;
# attempts of one delivery before it is marked `failed` (PARLEY_WEBHOOK_ATTEMPTS may lower it); the longest wait
# between two attempts (the wait doubles from PARLEY_WEBHOOK_RETRY_DELAY up to it); the longest a receiver may take
# to answer one attempt (PARLEY_WEBHOOK_TIMEOUT may lower it); the bytes of a receiver's answer Parley reads (past
# them the attempt failed, `answer_too_large`, and the rest is not read); the attempts a delivery's log keeps (the
# latest); deliveries one worker sends at once, and of them the most one workspace's deliveries hold (its share: a
# workspace whose receivers hang, or that queued many, waits on its own share while the others' deliveries are claimed
# beside it); seconds a claimed delivery stays held past its attempt's timeout, before another worker may send it
# again (its sender died); the longest grace of a secret rotated out; the attempts in a row that a webhook's receiver
# may time out before the webhook is backed off (its deliveries wait, unsent, the wait doubling from
# PARLEY_WEBHOOK_RETRY_DELAY up to WEBHOOK_MAX_RETRY_DELAY_SECONDS, until an attempt gets an answer; the workspace's
# other webhooks go on); the test pings a workspace may ask for (`POST /v1/webhooks/{id}/test`, 429 past it).
MAX_WEBHOOKS = 20
MAX_WEBHOOK_URL_CHARS = 2000
WEBHOOK_MAX_ATTEMPTS = 10
WEBHOOK_MAX_RETRY_DELAY_SECONDS = 3600.0
WEBHOOK_MAX_TIMEOUT_SECONDS = 30.0
MAX_WEBHOOK_ANSWER_BYTES = 64 * 1024
WEBHOOK_LOGGED_ATTEMPTS = 20
WEBHOOK_SENDS_AT_ONCE = 8
WEBHOOK_WORKSPACE_SHARE = 2
WEBHOOK_LEASE_MARGIN_SECONDS = 5.0
# the longest a sender waits before it looks again at a delivery whose run has not yet stored the status it announces
# (announced, then the status written; a run whose worker died between the two is resumed after its lease)
WEBHOOK_MAX_HOLD_SECONDS = 10.0
WEBHOOK_MAX_SECRET_GRACE_SECONDS = 7 * 24 * 3600
WEBHOOK_TIMEOUTS_BEFORE_BACKOFF = 3
WEBHOOK_TEST_RATE = "10/minute"
# Parallel branches of one designer `fan_out` node: as many as an arbitrator can tell apart (Answer A … H).
MAX_FAN_OUT_BRANCHES = MAX_PANEL_SIZE
# Inputs a person may send one run (`POST /v1/runs/{id}/input`: 409 `too_many_inputs` past it), and the messages a
# run takes in at one boundary (the rest wait for the next): 4,500 inputs once made an event page MongoDB refused.
# The cap counts messages; a control (`continue`, `guide`, `end`, `pause`) counts only when one of its kind was sent
# in the same lap of the run (at one wait, or between two: `store.runs.counts_against_cap`), so a run at the cap can
# always be let go on or ended, and its controls stay bounded by its waits.
MAX_RUN_INPUTS = 500
MAX_INPUTS_PER_BOUNDARY = 50
# The bytes of one stored page of a run's events: a page holding more is split, and a single event larger than this
# is stored without its data and fails its run (`event_too_large`); MongoDB refuses a document over 16 MB.
MAX_EVENT_PAGE_BYTES = 8 * 1024 * 1024
# How many times in a row a run's worker may stop while executing it (its lease lost, not handed over) before the
# run is failed (`run_crashed`) rather than resumed again: a run that kills its worker must not walk through all.
MAX_RUN_CRASHES = 2
# Steering a running debate (`POST /v1/runs/{id}/input`): a message's characters; the smallest `maxSeconds` a
# budget may give (a step's time cannot be estimated before the run: below this no debate gets through a round).
STEER_MESSAGE_MAX_CHARS = 4000
MIN_BUDGET_SECONDS = 5.0
# MCP tasks (`api/mcp_tasks.py`): how long a task is kept from its creation when the client asks for no `ttl`, the
# longest it may ask for (a longer one is cut to it), the polling interval suggested to clients (milliseconds), and
# the tasks one page of `tasks/list` holds. Past its ttl a task is gone (`tasks/get` says not found); its run stays
# in `/v1/runs`, as every run does.
MCP_TASK_TTL_MS = 24 * 3600 * 1000
MCP_TASK_MAX_TTL_MS = 7 * 24 * 3600 * 1000
MCP_TASK_POLL_INTERVAL_MS = 2000
MCP_TASKS_PAGE = 50
# The disagreement map of a panel's answers (`nodes/analysis.py`), reckoned by Parley itself, without a model: the
# answers one map compares (the largest panel; past it a ValueError, as the work grows with the
# square of the claims), the characters of one answer it reads (about 5,000 words), the fragments of one answer it
# reads (lines and the sentences in them, claims or not: 30,000 characters of lone dots or empty list items cost
# no more than a long answer's first claims), the claims of one answer it compares (the first ones: a 600-word
# answer holds about 30), the characters of one claim it reads and reports, and the entries of each list in the map.
# A map compares at most 8 × 32 claims, 32,640 pairs of them: tens of milliseconds even for answers of one repeated
# sentence.
ANALYSIS_MAX_ANSWERS = MAX_PANEL_SIZE
ANALYSIS_ANSWER_CHARS = 32_000
ANALYSIS_MAX_PIECES = 128
ANALYSIS_MAX_CLAIMS = 32
ANALYSIS_CLAIM_CHARS = 240
ANALYSIS_MAX_ITEMS = 40


@dataclass(frozen=True)
class Refusal:
    """Why a value cannot be accepted: a machine `code` and a sentence naming where (`at`) and what."""

    code: str
    message: str


def _where(path: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path)) or "body"


def _bad_text(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone UTF-16 surrogate (not a character; MongoDB stores only valid UTF-8)"
    return None


def refuse_unstorable(value: object, *, max_depth: int = MAX_JSON_DEPTH) -> Refusal | None:
    """Why MongoDB could not hold `value` (data a client sent that Parley may keep), or None when it can.

    Walks the value without recursion (a hostile document may nest thousands of levels) and stops at the
    first fault: nesting deeper than `max_depth`, a NUL character in a key, a lone surrogate in a key or a
    string, an integer outside 64 bits.
    """
    stack: list[tuple[object, list[str | int]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if len(path) > max_depth:
            return Refusal("too_deep", f"The JSON nests deeper than {max_depth} levels (at {_where(path[:8])}…)")
        if isinstance(item, dict):
            for key, child in item.items():
                key = str(key)
                if "\x00" in key:
                    return Refusal("unstorable_value", f"{_where(path)}: a key holds a NUL character")
                if (fault := _bad_text(key)) is not None:
                    return Refusal("unstorable_value", f"{_where(path)}: a key holds {fault}")
                stack.append((child, [*path, key]))
        elif isinstance(item, list):
            stack.extend((child, [*path, i]) for i, child in enumerate(item))
        elif isinstance(item, str):
            if (fault := _bad_text(item)) is not None:
                return Refusal("unstorable_value", f"{_where(path)}: the text holds {fault}")
        elif isinstance(item, int) and not isinstance(item, bool) and not INT64_MIN <= item <= INT64_MAX:
            return Refusal("unstorable_value", f"{_where(path)}: the integer is beyond 64 bits")
    return None
# The reasoning efforts a request, a router seat or an agent may ask for (OpenAI's `reasoning_effort` values; `none`
# where the model can answer without reasoning, as gpt-5.1 can); which models take one is the provider table's.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
# Model ids a request or a router may name a reasoning effort for (`{"<provider:model>": effort}`): each is checked
# against the provider table, so the map is bounded as any list a body holds.
MAX_REASONING_SEATS = 64
# Prompt caching (issue 38). Anthropic takes at most 4 `cache_control` breakpoints in one request
# (`llm.breakpoints` marks 2 at most: the end of the instructions, and the end of what came before the last message).
MAX_CACHE_BREAKPOINTS = 4
# The response cache (opt-in per request, `parley eval --cache`): an identical call (model, messages, parameters,
# at temperature 0 or with a seed) is answered from the database for this long after it was first made (a TTL index;
# reads skip an expired answer the index has not removed yet).
RESPONSE_CACHE_TTL_SECONDS = 24 * 3600
