"""The bounds Parley holds a tool server to as an MCP client (`llm/mcp.py`, issue 33): the URL allow-list under
dot segments, encodings and default ports; no credentials in a URL's query; no redirect followed; an answer read
only up to its cap, over HTTP and stdio; a stdio server's environment limited to the names an admin may set; a stdio
server's background processes ended with the call. Against the test tool server (tests/support/tool_server.py), over
stdio as Parley starts it and over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.core.limits import MAX_TOOL_ANSWER_BYTES
from parley.core.settings import Settings
from parley.llm import mcp

ROOT = Path(__file__).resolve().parents[2]
TOOL_SERVER = str(ROOT / "tests" / "support" / "tool_server.py")


def settings(*urls: str) -> Settings:
    return Settings(parley_tool_urls=list(urls), parley_tool_commands=[sys.executable], _env_file=None)


def url_server(url: str, **headers: str) -> mcp.Server:
    return mcp.Server(transport="http", url=url, headers=headers)


def stdio_server(**env: str) -> mcp.Server:
    # `-I`: the script's folder (tests/support, whose mcp.py is not the SDK) stays off sys.path.
    return mcp.Server(transport="stdio", command=sys.executable, args=("-I", TOOL_SERVER), env=env)


@pytest.fixture(scope="module")
def http_tools() -> Iterator[str]:
    """The test tool server over streamable HTTP on 127.0.0.1: its URL (`http://127.0.0.1:P/mcp`)."""
    proc = subprocess.Popen([sys.executable, "-I", TOOL_SERVER, "--http", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- the URL allow-list --------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://h.example:9000/mcp/../admin",
    "http://h.example:9000/mcp/%2e%2e/admin",
    "http://h.example:9000/mcp/%2E%2E/%2e%2E/admin",
    "http://h.example:9000/mcp/x/../../admin",
    "http://h.example:9000/mcp/%2F..%2Fadmin",
    "http://h.example:9000/mcp/..%2fadmin",
    "http://h.example:9000/mcp/..%5cadmin",
    "http://h.example:9000/mcp/..;/admin",
    "http://h.example:9000/mcp//../admin",
    "http://h.example:9000/mcp\\..\\admin",
    "http://h.example:9000/mcpx",
    "http://h.example:9001/mcp",
    "https://h.example:9000/mcp",
    "http://h.example.evil:9000/mcp",
    "http://user:pw@h.example:9000/mcp",
    "http://h.example:9000/mcp/%zz",
    "http://h.example:9000/mcp/ x",
])
def test_a_url_that_leaves_the_allowed_prefix_once_normalised_is_refused(url):
    assert mcp.refusal(url_server(url), settings("http://h.example:9000/mcp")) is not None


@pytest.mark.parametrize(("url", "normal"), [
    ("http://h.example:9000/mcp", "http://h.example:9000/mcp"),
    ("HTTP://H.Example:9000/mcp/tools", "http://h.example:9000/mcp/tools"),
    ("http://h.example:9000/mcp/./a/%7Euser/../b#part", "http://h.example:9000/mcp/a/b"),
    ("http://h.example:9000/mcp/a%20b/%41", "http://h.example:9000/mcp/a%20b/A"),
    ("http://h.example:9000/mcp/?region=eu&limit=3", "http://h.example:9000/mcp/?region=eu&limit=3"),
])
def test_an_allowed_url_is_kept_in_its_normal_form(url, normal):
    assert mcp.refusal(url_server(url), settings("http://h.example:9000/mcp")) is None
    assert mcp.normalise_url(url) == normal


def test_default_ports_are_the_same_origin():
    allowed = settings("https://t.example/mcp", "http://u.example:80/")
    assert mcp.refusal(url_server("https://t.example:443/mcp/x"), allowed) is None
    assert mcp.refusal(url_server("http://u.example/any"), allowed) is None
    assert mcp.refusal(url_server("http://t.example/mcp"), allowed) is not None  # another scheme, another port
    assert mcp.normalise_url("https://t.example:443/mcp/x") == "https://t.example/mcp/x"


@pytest.mark.parametrize("query", ["api_key=k", "apiKey=k", "token=t", "access_token=t", "key=k", "secret=s",
                                   "password=p", "X-Amz-Signature=s", "a=1&client_secret=s", "auth=x", "sig=x"])
def test_credentials_in_the_query_are_refused_and_headers_are_named_instead(query):
    url = f"http://h.example:9000/mcp?{query}"
    why = mcp.refusal(url_server(url), settings("http://h.example:9000/mcp"))
    assert why is not None and "headers" in why and "=k" not in why and "=s" not in why


def test_a_url_stored_with_credentials_before_is_shown_without_them():
    assert mcp.shown_url("http://u:p@h.example/mcp?api_key=s3cret&region=eu") == (
        "http://h.example/mcp?api_key=[redacted]&region=eu")


@pytest.mark.parametrize(("name", "value"), [("Host", "x"), ("proxy-authorization", "x"), ("Content-Length", "1"),
                                             ("X-Api-Key", "a\r\nHost: evil"), ("Bad Name", "x")])
def test_a_header_that_frames_the_request_is_refused_and_asked_again_before_each_call(name, value):
    assert mcp.header_refusal(name, value) is not None
    server = url_server("http://h.example:9000/mcp", **{name: value})
    assert mcp.refusal(server, settings("http://h.example:9000/mcp")) is not None
    assert mcp.header_refusal("Authorization", "Bearer k") is None


# --- redirects, and the answer's size ------------------------------------------------------------


async def test_no_redirect_is_followed(http_tools):
    moved = http_tools.rsplit("/", 1)[0] + "/moved"  # a 307 to /mcp on the same origin
    with pytest.raises(mcp.ServerUnreachable, match="redirect"):
        await mcp.list_tools(url_server(moved, Authorization="Bearer k"), settings(moved), timeout=20)
    assert {t.name for t in await mcp.list_tools(url_server(http_tools), settings(http_tools), timeout=20)} >= {"big"}


async def test_an_http_answer_is_read_only_up_to_its_cap(http_tools):
    server, allowed = url_server(http_tools), settings(http_tools)
    fits = await mcp.call_tool(server, allowed, "big", {"size": MAX_TOOL_ANSWER_BYTES // 4}, timeout=20)
    assert len(fits.text) == MAX_TOOL_ANSWER_BYTES // 4
    tracemalloc.start()
    try:
        started = time.monotonic()
        with pytest.raises(mcp.ServerUnreachable, match=f"larger than {MAX_TOOL_ANSWER_BYTES:,} bytes"):
            await mcp.call_tool(server, allowed, "big", {"size": 40 * MAX_TOOL_ANSWER_BYTES}, timeout=20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MAX_TOOL_ANSWER_BYTES, peak  # the 40 MB answer was not read whole
    assert time.monotonic() - started < 15


async def test_a_stdio_line_is_read_only_up_to_its_cap():
    server, allowed = stdio_server(), settings()
    fits = await mcp.call_tool(server, allowed, "big", {"size": MAX_TOOL_ANSWER_BYTES // 4}, timeout=20)
    assert len(fits.text) == MAX_TOOL_ANSWER_BYTES // 4
    tracemalloc.start()
    try:
        with pytest.raises(mcp.ServerUnreachable, match=f"larger than {MAX_TOOL_ANSWER_BYTES:,} bytes"):
            await mcp.call_tool(server, allowed, "big", {"size": 40 * MAX_TOOL_ANSWER_BYTES}, timeout=20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MAX_TOOL_ANSWER_BYTES, peak


# --- a stdio server's environment and processes --------------------------------------------------


LOADERS = ["PERLLIB", "PERL5LIB", "PERL5OPT", "GCONV_PATH", "OPENSSL_CONF", "OPENSSL_MODULES", "npm_config_registry",
           "NPM_CONFIG_REGISTRY", "PIP_INDEX_URL", "UV_INDEX_URL", "LD_PRELOAD", "LD_LIBRARY_PATH",
           "DYLD_INSERT_LIBRARIES", "PYTHONPATH", "PYTHONSTARTUP", "NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB",
           "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH", "MAVEN_OPTS", "GIT_SSH_COMMAND", "GOFLAGS", "GOPROXY",
           "LUA_PATH", "XDG_CONFIG_HOME", "HOME", "PATH", "SHELL", "ENV", "BASH_ENV", "PS4", "BASH_FUNC_x%%",
           "Path", "http_proxy", "EDITOR", "TMPDIR", "ZDOTDIR", "GEM_HOME", "BUNDLE_GEMFILE", "CARGO_HOME",
           "DOTNET_STARTUP_HOOKS", "CORECLR_PROFILER", "R_PROFILE"]
ALLOWED = ["WEATHER_TOKEN", "GITHUB_PERSONAL_ACCESS_TOKEN", "BRAVE_API_KEY", "DATABASE_URL", "GOOGLE_API_KEY",
           "SLACK_TEAM_ID", "TZ", "LANG", "PERSONAL_TOKEN"]


@pytest.mark.parametrize("name", LOADERS)
def test_a_stdio_server_may_not_be_given_a_variable_that_loads_code(name):
    assert mcp.refusal(stdio_server(**{name: "x"}), settings()) is not None  # asked before each start
    why = mcp.env_refusal(name)
    assert why is not None and name in why


@pytest.mark.parametrize("name", ALLOWED)
def test_a_stdio_server_may_be_given_its_own_settings(name):
    assert mcp.refusal(stdio_server(**{name: "x"}), settings()) is None
    assert mcp.env_refusal(name) is None


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
async def test_a_stdio_servers_background_processes_end_with_the_call(tmp_path):
    pidfile = tmp_path / "sleeper.pid"
    answer = await mcp.call_tool(stdio_server(), settings(), "spawn", {"pidfile": str(pidfile)}, timeout=20)
    sleeper = int(pidfile.read_text())
    assert answer.text == f"started {sleeper}"
    assert not running(sleeper)

    pidfile.unlink()  # a call that times out ends them too
    with pytest.raises(TimeoutError):
        await mcp.call_tool(stdio_server(), settings(), "spawn", {"pidfile": str(pidfile), "hang": 60}, timeout=3)
    assert not running(int(pidfile.read_text()))


# --- where a server's name leads (issue 45) --------------------------------------------------------------------


async def test_a_name_that_leads_to_a_private_address_is_not_called_unless_the_deployment_names_it(http_tools,
                                                                                                   monkeypatch):
    """The allow-list names `tools.example`, which resolves to 127.0.0.1 (the test tool server): refused. Named
    `localhost` (its loopback addresses), the call connects to the address resolved, as `localhost` (the tool
    server, like any MCP server guarding against DNS rebinding, answers only that name)."""
    from parley.core import outbound

    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"] if host in ("tools.example", "localhost") else [host]

    monkeypatch.setattr(outbound, "resolve", resolve)
    named = http_tools.replace("127.0.0.1", "tools.example")
    with pytest.raises(mcp.ServerUnreachable, match="127.0.0.1.*PARLEY_OUTBOUND_NETWORKS"):
        await mcp.list_tools(url_server(named), settings(named), timeout=20)
    local = http_tools.replace("127.0.0.1", "localhost")
    assert {t.name for t in await mcp.list_tools(url_server(local), settings(local), timeout=20)} >= {"big"}
    assert asked[0] == "tools.example" and "localhost" in asked


@pytest.mark.parametrize(("host", "address", "allowed", "networks", "refused"), [
    ("hooks.example", "93.184.215.14", "http://hooks.example/", (), False),
    ("hooks.example", "10.1.2.3", "http://hooks.example/", (), True),
    ("hooks.example", "169.254.169.254", "http://hooks.example/", (), True),
    ("hooks.example", "::ffff:127.0.0.1", "http://hooks.example/", (), True),
    ("hooks.example", "fd00::1", "http://hooks.example/", (), True),
    ("hooks.example", "10.1.2.3", "http://hooks.example/", ("10.0.0.0/8",), False),
    ("127.0.0.1", "127.0.0.1", "http://127.0.0.1:9000/", (), False),
    ("localhost", "127.0.0.1", "http://localhost:9000/", (), False),
    ("localhost", "10.0.0.1", "http://localhost:9000/", (), True),
])
def test_a_private_address_is_reached_only_where_the_deployment_names_it(host, address, allowed, networks, refused):
    from parley.core.outbound import Reach

    why = Reach((allowed,), "PARLEY_TOOL_URLS", networks).refusal(host, address)
    assert (why is not None) is refused, why
