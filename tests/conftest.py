"""Shared test fixtures: a real Strata broker as a subprocess, and kcat.

``broker`` (function scope) and ``module_broker`` (module scope) start
``python -m service up`` on a free loopback port with its own data dir and hand
back a :class:`BrokerProcess`. ``start_broker`` / ``module_start_broker`` are
factories for brokers with extra ``--set`` options::

    def test_x(start_broker):
        b = start_broker(sets={"log.segment.bytes": "65536"})

Every broker started through these fixtures is killed at teardown, and its
stdout+stderr are kept in ``<tmp>/broker-<port>.log`` (``.log_text()``).
"""

from __future__ import annotations

import os

# Every Log and LogManager method marked owner_only checks its thread, in this process and
# in every broker it starts (their environment is copied from this one): a thread that is
# not a log's owner touching it fails the test (local_tier/ownership.py). Set before any
# product module is imported, since the check is decided at import.
os.environ.setdefault("STRATA_CHECK_LOG_OWNER", "1")
# Every metadata commit, here and in every broker started, checks that replaying its batch of
# records gives exactly the image the controller computed (controller/commit.py).
os.environ.setdefault("STRATA_VERIFY_METADATA_REPLAY", "1")
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import pytest

from tests import scheduling

REPO_ROOT = Path(__file__).resolve().parent.parent
# The suite starts hundreds of Python processes (brokers, CLI runs, Spark's Python workers,
# client scripts). Where PYTHONDONTWRITEBYTECODE is set, each compiled the whole tree again:
# 0.8 s of every broker's 2.8 s start. They keep their bytecode in the tree's build/ (ignored
# by git), not in a shared /tmp where another user could leave bytecode for them to run.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(REPO_ROOT / "build" / "pycache"))
BROKER_START_TIMEOUT_S = 30.0
READY_WAIT_S = 5.0  # at most this long for /v1/ready once the Kafka port is bound
BROKER_STOP_TIMEOUT_S = 20.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The heaviest kinds of test file first (tests/scheduling.py); a file's tests keep their
    order."""
    items.sort(key=lambda item: scheduling.rank_of(item.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None  # a --dist the caller chose is left as xdist makes it
    return scheduling.heavy_first_scheduler(config, log)


# Ports for test servers come from below Linux's ephemeral range (32768-60999 by default):
# the kernel never hands these out on its own, so a client's outgoing connection or another
# process's bind(0) cannot take a port between free_port() and the server's bind. Each
# pytest-xdist worker draws from its own slice; a process starts at a point of its slice
# picked by its pid (a child pytest of a worker does not walk the same ports as its parent).
_PORT_LOW, _PORT_HIGH = 10_000, 32_000
_next_port: int | None = None


def _port_slice() -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return _PORT_LOW, _PORT_HIGH
    width = (_PORT_HIGH - _PORT_LOW) // count
    low = _PORT_LOW + int(worker[2:]) % count * width
    return low, low + width


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, and that no other free_port()
    of this test run hands out while it is in use (see above)."""
    global _next_port
    low, high = _port_slice()
    if _next_port is None or not low <= _next_port < high:
        _next_port = low + (os.getpid() * 7919) % (high - low)
    for _ in range(high - low):
        port = _next_port
        _next_port = low + (_next_port + 1 - low) % (high - low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {low}-{high}")


def subprocess_env() -> dict[str, str]:
    """Environment for child processes: the repo importable, output unbuffered."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("STRATA_BOOTSTRAP", None)
    return env


#: every broker log of this process, with how far it was checked for ownership violations
_BROKER_LOGS: dict[Path, int] = {}


def owner_violations() -> list[str]:
    """Lines of the broker logs written since the last call that report a thread touching a
    log it does not own (``LogOwnerError``, raised with STRATA_CHECK_LOG_OWNER=1)."""
    found = []
    for path, checked in list(_BROKER_LOGS.items()):
        try:
            with open(path, "rb") as f:
                f.seek(checked)
                data = f.read()
        except OSError:
            continue
        _BROKER_LOGS[path] = checked + len(data)
        found += [f"{path.name}: {line}" for line in data.decode(errors="replace").splitlines()
                  if "LogOwnerError" in line]
    return found


@pytest.fixture(autouse=True)
def _no_log_owner_violations() -> Iterator[None]:
    """Fails a test during which a broker it talks to logged a log-ownership violation."""
    owner_violations()  # what earlier tests' brokers wrote is theirs
    yield
    if bad := owner_violations():
        pytest.fail("a broker touched a log off its owner thread:\n" + "\n".join(bad[:20]))


class BrokerProcess:
    """One ``python -m service up`` subprocess with a fixed data dir and port.

    ``restart()`` starts it again on the same data dir and port. The log file
    collects the output of every run, each started with a marker line.
    """

    def __init__(self, data_dir: Path, port: int, sets: Mapping[str, str] | None = None,
                 log_path: Path | None = None, args: list[str] | None = None,
                 listeners: str | None = None, env: Mapping[str, str] | None = None,
                 open_files: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.host = "127.0.0.1"
        self.bootstrap = f"{self.host}:{port}"
        self.sets = dict(sets or {})
        self.args = list(args or [])  # more `strata up` options, e.g. --object-store URL
        #: `--listeners` instead of `--listen` ("{port}" is ``port``, the one waited for)
        self.listeners = None if listeners is None else listeners.format(port=port)
        self.env = dict(env or {})  # more environment, e.g. STRATA_BOOTSTRAP_USER
        self.open_files = open_files  # the broker's open-files limit (soft and hard), e.g. 256
        self.http_port = free_port()
        self.admin_url = f"http://127.0.0.1:{self.http_port}"
        self.log_path = log_path or self.data_dir.parent / f"broker-{port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.runs = 0

    # -- lifecycle ----------------------------------------------------------------------

    def command(self) -> list[str]:
        extra: list[str] = []
        for key, value in self.sets.items():
            extra += ["--set", f"{key}={value}"]
        where = ["--listen", self.bootstrap] if self.listeners is None else ["--listeners", self.listeners]
        python = [sys.executable]
        if self.open_files is not None:  # as `ulimit -n N` before exec: the limit is the broker's own
            python += ["-c", "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
                       f"({self.open_files}, {self.open_files})); os.execv(sys.executable, [sys.executable] + sys.argv[1:])"]
        return [*python, "-m", "service", "up", "--data-dir", str(self.data_dir),
                *where, "--http", f"127.0.0.1:{self.http_port}", *self.args, *extra]

    def start(self, *, wait: bool = True) -> BrokerProcess:
        """Start the process and, with ``wait``, wait until it listens (and is ready)."""
        if self.running:
            raise RuntimeError("broker already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.runs += 1
        self._close_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - held across the run
        self._log.write(f"\n===== strata test harness: start #{self.runs}: "
                        f"{' '.join(self.command())}\n".encode())
        self._log.flush()
        _BROKER_LOGS.setdefault(self.log_path, 0)
        self.proc = subprocess.Popen(
            self.command(), cwd=REPO_ROOT, env={**subprocess_env(), **self.env},
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if wait:
            self._wait_until_listening()
        return self

    def start_that_ends(self, within_s: float = 60.0) -> tuple[int, float]:
        """Start a broker expected to exit by itself: its exit code and the seconds from the
        start to its exit."""
        started = time.monotonic()
        self.start(wait=False)
        assert self.proc is not None
        code = self.proc.wait(within_s)
        return code, time.monotonic() - started

    def _wait_until_listening(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(
                    f"broker exited with code {code} before listening on {self.bootstrap}; "
                    f"log:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    self._wait_until_ready(min(deadline, time.monotonic() + READY_WAIT_S))
                    return
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"broker did not listen on {self.bootstrap} within "
                           f"{BROKER_START_TIMEOUT_S:.0f}s; log:\n{self.log_tail()}")

    def _wait_until_ready(self, until: float) -> None:
        """The Kafka port is bound before the broker serves it (requests wait in the kernel's
        queue), and the HTTP listener comes up after it: until ``/v1/ready`` answers 200, as
        a test that talks to the admin API first would otherwise meet a refused connection
        or a 503. Best effort: a broker that is not ready by ``until`` (a cluster member
        waiting for a controller, an object store made to fail), an HTTPS or authenticated
        listener, is left to the test."""
        import urllib.error
        import urllib.request

        while time.monotonic() < until and self.running:
            try:
                with urllib.request.urlopen(f"{self.admin_url}/v1/ready", timeout=0.5):
                    return
            except urllib.error.HTTPError as exc:
                if exc.code != 503:
                    return  # answered (401 behind authentication, ...): up
            except urllib.error.URLError as exc:
                if not isinstance(exc.reason, ConnectionRefusedError):
                    return  # not plain HTTP (TLS), or something the test is about
            except Exception:  # noqa: BLE001 - not plain HTTP (http.client's own errors): the test's
                return
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = BROKER_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_log()
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL (no clean shutdown) and wait."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()
        return self.proc.returncode

    def restart(self, clean: bool = True) -> BrokerProcess:
        """Stop (SIGTERM when ``clean``, else SIGKILL) and start on the same dir and port."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- inspection ---------------------------------------------------------------------

    def log_text(self) -> str:
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_text()[-chars:]

    def cpu_seconds(self) -> float:
        """utime + stime of the broker process so far, from /proc/PID/stat."""
        with open(f"/proc/{self.pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        # fields[0] is field 3 (state); utime is field 14, stime field 15.
        ticks = int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def __repr__(self) -> str:
        return f"BrokerProcess({self.bootstrap}, data_dir={self.data_dir})"


BrokerFactory = Callable[..., BrokerProcess]


class _BrokerPool:
    """Starts brokers in a tmp dir and kills all of them at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.brokers: list[BrokerProcess] = []

    def __call__(self, sets: Mapping[str, str] | None = None, **kw: Any) -> BrokerProcess:
        n = len(self.brokers)
        broker = BrokerProcess(self.tmp / f"broker{n}" / "data", free_port(), sets=sets, **kw)
        self.brokers.append(broker)
        return broker.start()

    def close(self) -> None:
        for broker in self.brokers:
            try:
                broker.kill()
            except Exception as exc:  # noqa: BLE001 - teardown must reach every broker
                print(f"could not kill {broker}: {exc}", file=sys.stderr)


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Factory for function-scoped brokers: ``start_broker(sets={...})``."""
    pool = _BrokerPool(tmp_path)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def module_start_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerFactory]:
    """Factory for module-scoped brokers: ``module_start_broker(sets={...})``."""
    pool = _BrokerPool(tmp_path_factory.mktemp("brokers"))
    yield pool
    pool.close()


@pytest.fixture
def broker(start_broker: BrokerFactory) -> BrokerProcess:
    """A fresh broker with default configs for one test."""
    return start_broker()


@pytest.fixture(scope="module")
def module_broker(module_start_broker: BrokerFactory) -> BrokerProcess:
    """A broker shared by the tests of one module (use distinct topic names)."""
    return module_start_broker()


def tools_required() -> bool:
    """Whether a test whose tool is missing fails instead of skipping: under ``.ci/test``
    (``STRATA_REQUIRE_TOOLS=1``) and on CI (``CI=true``), where a tool the suite needs that
    could not be installed is a failure, not a silent skip of whole groups of tests."""
    return (os.environ.get("STRATA_REQUIRE_TOOLS", "") not in ("", "0")
            or os.environ.get("CI", "").lower() in ("true", "1"))


def require_tool(*names: str, package: str) -> str:
    """The path of the first of ``names`` on PATH; without any, the test is skipped, or
    failed when :func:`tools_required`, with the package that provides it."""
    for name in names:
        path = shutil.which(name)
        if path is not None:
            return path
    problem = f"{names[0]} is not installed (apt-get install -y {package})"
    if tools_required():
        pytest.fail(f"{problem}: the suite needs it; .ci/test installs it", pytrace=False)
    pytest.skip(problem)


@pytest.fixture(scope="session")
def kcat() -> str:
    """Path of the kcat binary (:func:`require_tool`: a skip, or a failure on CI, without it)."""
    return require_tool("kcat", "kafkacat", package="kcat")


# S3 endpoints (moto server over HTTP; MinIO where Docker exists) for every test directory.
# Imported last: the module uses free_port from here.
# A cluster of broker processes sharing one object store (tests/cluster_fixtures.py).
from tests.cluster_fixtures import module_start_cluster, start_cluster  # noqa: F401
from tests.s3_fixtures import (  # noqa: F401
    minio,
    moto_server,
    s3_bucket,
    s3_credentials_env,
)

# Certificates made at test time for the TLS tests (tests/security_fixtures.py).
from tests.security_fixtures import pki  # noqa: F401

# A small tmpfs that fills up, for the full-disk tests (skips where mount is not permitted).
from tests.tmpfs_fixtures import small_tmpfs  # noqa: F401
