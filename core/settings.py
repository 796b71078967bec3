"""Deployment configuration for Parley, read once from the environment.

Per-run knobs (rounds, temperatures, which model a node uses) live in each graph's
run context instead; this module only says where things are and how to reach them.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from parley.core.sealing import check_key
from parley.core.limits import (
    MAX_BODY_BYTES,
    WEBHOOK_MAX_ATTEMPTS,
    WEBHOOK_MAX_RETRY_DELAY_SECONDS,
    WEBHOOK_MAX_TIMEOUT_SECONDS,
    WORKSPACE_MAX_STORED_BYTES,
)

EMBEDDED_MODEL_ID = "local:smollm2"
HOSTED_DEFAULT_MODEL = "gpt-4o-mini"
# The `router/debate` preset's panel when an endpoint is configured: one model of each of three families.
HOSTED_DEBATE_MODELS = ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash")
# The `router/quality` and `router/budget` presets' panels when an endpoint is configured: three families each, the
# strongest models of the price table, and the cheapest.
HOSTED_QUALITY_MODELS = ("openai:gpt-5", "anthropic:claude-opus-4-5", "google:gemini-2.5-pro")
HOSTED_BUDGET_MODELS = ("openai:gpt-5-nano", "google:gemini-2.5-flash-lite", "deepseek:deepseek-chat")


class Settings(BaseSettings):
    """Everything Parley reads from the environment (or a `.env` file)."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    openai_api_key: str | None = Field(None, description="Key for the default OpenAI-compatible endpoint.")
    openai_base_url: str | None = Field(None, description="Default OpenAI-compatible endpoint.")
    openai_model: str | None = Field(None, description="Default model id (`provider:model` or a bare name).")
    mongodb_uri: str | None = Field(None, description="MongoDB to store everything in; unset starts the embedded server.")
    mongodb_db: str = Field("parley", description="Database name inside MONGODB_URI.")
    parley_home: Path = Field(Path("~/.parley"), description="Embedded data, server logs and config files.")
    parley_debate_models: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description="Fallback list of the `router/debate` preset (comma list in the environment); "
        "unset or empty means `debate_models`' default.",
    )
    parley_debate_allow_same_family: bool | None = Field(
        None,
        description="Whether the preset may fill seats by resampling one family; unset means "
        "`debate_allow_same_family`'s automatic choice.",
    )
    parley_quality_models: Annotated[list[str] | None, NoDecode] = Field(
        None, description="The `router/quality` preset's models (comma list); unset: three flagship models of distinct "
        "families with an endpoint configured, the embedded model without one.")
    parley_budget_models: Annotated[list[str] | None, NoDecode] = Field(
        None, description="The `router/budget` preset's models (comma list, adaptive depth); unset: three low-priced "
        "models of distinct families with an endpoint configured, the embedded model without one.")
    parley_arbitrator_model: str | None = Field(None, description="Arbitrator of the preset; default model when unset.")
    parley_self_moa_model: str | None = Field(
        None, description="The one model the `router/self-moa` preset samples (Self-MoA: several answers of the "
        "strongest model, then a decision); the default model when unset.")
    parley_host: str = Field(
        "127.0.0.1", description="Interface `parley serve` listens on unless `--host` names one; the container image "
        "sets `0.0.0.0`.")
    parley_port: int = Field(
        8000, ge=1, le=65535, description="Port `parley serve` listens on unless `--port` names one (the container "
        "image's health check asks this port).")
    parley_model_port: int = Field(0, description="Port of the embedded model server; 0 picks a free one.")
    parley_db_port: int = Field(0, description="Port of the embedded database; 0 picks a free one.")
    parley_max_body_bytes: int = Field(
        MAX_BODY_BYTES, ge=1024, description="Bytes of the largest request body any route reads (413 beyond).")
    parley_workspace_max_stored_bytes: int = Field(
        WORKSPACE_MAX_STORED_BYTES, ge=0, description="Bytes one workspace's stored responses (`POST /v1/responses` "
        "with `store: true`) may hold in all (1 GiB by default): past it a response to store is refused with 413 "
        "`storage_quota_exceeded`, and nothing stored is lost; deleting responses, or their expiry, makes room.")
    parley_request_timeout: float = Field(
        120.0, gt=0, description="Seconds a model call waits for its next piece of data: the HTTP read timeout, "
        "and the longest gap between streamed chunks (keep-alive comments do not count).")
    parley_model_call_deadline: float = Field(
        300.0, gt=0, description="Seconds one model call may take in all, streamed or not; past it the call fails "
        "as a timeout, however steadily the endpoint keeps sending (empty deltas, a slow drip).")
    parley_run_lease: float = Field(
        5.0, gt=0, description="Seconds a worker's hold on a run lasts without renewal; after that another worker "
        "resumes the run from its last checkpoint.")
    parley_run_heartbeat: float = Field(
        1.0, gt=0, description="Seconds between a worker's lease renewals (from a thread of its own), which also "
        "pick up the cancels asked on other workers; the longest a follower's poll backs off to, and how often a "
        "follower woken by a change stream reads anyway.")
    parley_run_poll: float = Field(
        0.25, gt=0, description="Seconds between a follower's looks at the database for new events of a run "
        "another worker executes, doubling (up to the heartbeat) while none comes; on a database with change streams (a "
        "replica set) followers are woken instead.")
    parley_run_deadline: float = Field(
        1800.0, gt=0, description="Seconds a run may take in all, from its creation (less the time it waited for a "
        "person): past it the run is stopped and stored `failed` with the code `run_deadline` (its usage billed and "
        "its reservation settled as for any failure).")
    parley_run_durability: Literal["async", "sync"] = Field(
        "async", description="LangGraph checkpoint durability: `async` saves each step's checkpoint while the next "
        "runs, `sync` before it starts (slower; a crash then never repeats a finished step's model calls).")
    parley_run_keep_checkpoints: bool = Field(
        False, description="Keep a run's last LangGraph checkpoint after it ends (for debugging); otherwise it is "
        "deleted at the end, or by a TTL index if the end never comes.")
    parley_trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses or networks (comma list, e.g. `127.0.0.1,10.0.0.0/8`) of the reverse proxies whose "
        "X-Forwarded-For and X-Forwarded-Proto headers are believed; from any other peer they are ignored, so "
        "the client address (which rate limits count by) is the connection's. Empty (the default) trusts none.")
    parley_table_early_stop: float = Field(
        0.8, ge=0, le=1, description="The confidence every regular agent of a round table must state, all taking "
        "one stance in round 0, for the table to skip its debate rounds and go to its synthesis (`stoppedBy: "
        "\"unanimous\"`); 0 never skips them.")
    parley_stream_token_grace: float = Field(
        3600.0, ge=0, description="Seconds a duel's stream token (`?token=` of its events URL) keeps working after "
        "the duel ended; it works throughout the duel itself.")

    parley_first_credit_usd: float = Field(
        5.0, ge=0, description="USD of credit that workspace `default` gets with the first key `parley serve` makes "
        "on an empty embedded database, so that a fresh install answers chat completions on a priced model at once "
        "(they reserve their estimated cost from the workspace's credit); 0 gives none.")

    parley_worker_timeout: float = Field(
        30.0, ge=1, description="Seconds a worker of `parley serve --workers N` has to start serving, and to answer "
        "each of uvicorn's health pings, before uvicorn replaces it.")

    parley_tool_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="URL prefixes (comma list, e.g. `https://tools.example.com/mcp,http://127.0.0.1:9000/`) that a "
        "workspace admin may register as MCP servers for agents' tools (`/v1/tools`); a server's URL must start "
        "with one of them. Empty (the default) allows no URL server: Parley calls no host that its operator did "
        "not name.")
    parley_tool_commands: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Commands (comma list of executables, e.g. `npx,uvx,/opt/tools/weather-mcp`) that a workspace "
        "admin may register as stdio MCP servers; each runs as a child of Parley with a clean environment (no "
        "Parley setting or secret, only PATH, HOME and the like, plus the env the admin registered). Empty (the "
        "default) allows none.")

    parley_webhook_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="URL prefixes (comma list, e.g. `https://hooks.example.com/parley,http://127.0.0.1:9000/`) that a "
        "workspace admin may subscribe to run events (`/v1/webhooks`); a receiver's URL must lie under one of them, "
        "by the rules of `PARLEY_TOOL_URLS`, checked at subscription and again before each attempt. Empty (the "
        "default) allows none.")
    parley_encryption_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Fernet keys (comma list; make one with `python -c \"from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())\"`) that seal webhook signing secrets in the database. The first "
        "seals, every one opens: to rotate, put the new key first and keep the old after it until every worker has "
        "restarted (each seals the secrets again under the first when it starts), then drop it. Empty (the default): "
        "a key Parley makes in PARLEY_HOME/encryption.key, enough where every worker shares PARLEY_HOME; set it "
        "where they do not.")
    parley_outbound_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Private networks (comma list of addresses or CIDRs, e.g. `10.0.0.0/8,fd00::/8`) that a name in "
        "PARLEY_TOOL_URLS or PARLEY_WEBHOOK_URLS may resolve to. Parley resolves a tool server's or a receiver's host "
        "before each call and connects to the address it checked; a private, loopback or link-local address is "
        "refused unless the allow-list names it itself (`http://127.0.0.1:9000/`, `http://localhost:9000/`) or it "
        "lies in one of these. Empty (the default): names lead to public addresses only.")
    parley_webhook_timeout: float = Field(
        10.0, gt=0, le=WEBHOOK_MAX_TIMEOUT_SECONDS, description="Seconds a webhook receiver has to answer one "
        "delivery attempt (connecting included); past them the attempt failed and is retried.")
    parley_webhook_retry_delay: float = Field(
        30.0, gt=0, le=WEBHOOK_MAX_RETRY_DELAY_SECONDS, description="Seconds before a failed webhook delivery is "
        "tried again; the wait doubles after each failed attempt, up to an hour.")
    parley_webhook_attempts: int = Field(
        WEBHOOK_MAX_ATTEMPTS, ge=1, le=WEBHOOK_MAX_ATTEMPTS, description="Attempts of one webhook delivery before "
        "it is marked `failed` (it can be replayed then).")
    parley_webhook_poll: float = Field(
        1.0, gt=0, description="Seconds between a worker's looks for webhook deliveries that are due: how long a "
        "run event may wait before it is first sent.")

    parley_mcp_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="`Host` values `/mcp` answers (comma list; `name:*` for any port), against DNS rebinding; any "
        "other is refused (421 `host_not_allowed`), whatever interface Parley listens on. Empty (the default): the "
        "loopback names alone (`localhost`, `127.0.0.1`, `[::1]`, any port): a deployment reached by another name "
        "sets it to the names its clients use (compose.yaml and deploy/kubernetes/configmap.yaml do).")
    parley_mcp_allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="`Origin` values `/mcp` answers when a request carries one (a browser's; comma list, "
        "`http://name:*` for any port). Empty (the default): loopback origins on a loopback address, else the "
        "request's own origin (its scheme and `Host`) only. A request without `Origin` (not from a browser) is "
        "answered.")

    @field_validator("parley_debate_models", "parley_quality_models", "parley_budget_models", "parley_trusted_proxies",
                     "parley_tool_urls", "parley_tool_commands", "parley_webhook_urls", "parley_mcp_allowed_hosts",
                     "parley_mcp_allowed_origins", "parley_outbound_networks", "parley_encryption_keys",
                     mode="before")
    @classmethod
    def _split_comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("parley_outbound_networks", mode="after")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            ipaddress.ip_network(network, strict=False)  # a ValueError names the one that is not a network
        return value

    @field_validator("parley_encryption_keys", mode="after")
    @classmethod
    def _keys(cls, value: list[str]) -> list[str]:
        return [check_key(key) for key in value]

    @field_validator("parley_home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @property
    def uses_embedded_model(self) -> bool:
        """True when no hosted endpoint is configured, so Parley serves its own model."""
        return not (self.openai_api_key or self.openai_base_url)

    @property
    def default_model(self) -> str:
        """The model id used where neither the request nor the run context names one."""
        if self.openai_model:
            return self.openai_model
        return EMBEDDED_MODEL_ID if self.uses_embedded_model else f"openai:{HOSTED_DEFAULT_MODEL}"

    @property
    def debate_models(self) -> list[str]:
        """The `router/debate` preset's models: PARLEY_DEBATE_MODELS when set, else the deployment's default.

        A fresh install has one model, the embedded one, so that is its whole list; with an endpoint
        configured the default is three hosted models of distinct families.
        """
        if self.parley_debate_models:
            return list(self.parley_debate_models)
        return [EMBEDDED_MODEL_ID] if self.uses_embedded_model else list(HOSTED_DEBATE_MODELS)

    def preset_models(self, preset: str) -> list[str]:
        """The models of the `router/quality` or `router/budget` preset: its PARLEY_*_MODELS when set, else the
        embedded model on a fresh install (resampled, as `router/debate`'s is) and three hosted models otherwise."""
        configured = {"quality": self.parley_quality_models, "budget": self.parley_budget_models}[preset]
        if configured:
            return list(configured)
        hosted = {"quality": HOSTED_QUALITY_MODELS, "budget": HOSTED_BUDGET_MODELS}[preset]
        return [EMBEDDED_MODEL_ID] if self.uses_embedded_model else list(hosted)

    @property
    def debate_allow_same_family(self) -> bool:
        """Whether the preset fills seats by resampling when its models have too few families.

        PARLEY_DEBATE_ALLOW_SAME_FAMILY decides when set; otherwise only the embedded default list
        (one model, so one family) resamples, and a configured PARLEY_DEBATE_MODELS keeps the family rule.
        """
        if self.parley_debate_allow_same_family is not None:
            return self.parley_debate_allow_same_family
        return self.uses_embedded_model and not self.parley_debate_models

    @property
    def arbitrator_model(self) -> str:
        return self.parley_arbitrator_model or self.default_model

    @property
    def self_moa_model(self) -> str:
        return self.parley_self_moa_model or self.default_model

    @property
    def providers_file(self) -> Path:
        return self.parley_home / "providers.json"

    @property
    def prices_file(self) -> Path:
        return self.parley_home / "prices.json"


@lru_cache
def get_settings() -> Settings:
    """Return the process-wide settings; tests call `get_settings.cache_clear()` after changing the environment."""
    return Settings()
