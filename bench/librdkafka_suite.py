"""librdkafka's own integration suite against Strata: a conformance run (issue 37).

    python bench/librdkafka_suite.py --src /work/librdkafka-src --setup single --setup three
    python bench/librdkafka_suite.py --setup single --group-protocol consumer   # KIP-848
    python bench/librdkafka_suite.py --setup kafka --kafka-home /work/kafka-4.1.2  # the reference
    python bench/librdkafka_suite.py --tests 0098,0077 --setup single          # a few tests
    python bench/librdkafka_suite.py merge W1/results.json W2/results.json     # one table

librdkafka's tests (``tests/`` of confluentinc/librdkafka) were written for Apache Kafka by
librdkafka's authors, so they judge Strata with nobody here having tuned them. This script:

* builds the suite from ``--src`` when ``tests/test-runner`` is missing
  (``./configure && make libs && cd tests && make build``, under ``nice``);
* starts the brokers: ``single`` is ``strata up --brokers 1``, ``three`` is
  ``strata up --brokers 3`` (three processes sharing one ``file://`` object store, new topics
  replicated 3 times by default), ``kafka`` is the Apache Kafka 4.1.2 broker built by
  ``../shared/tools/kafka-broker/`` (single node, KRaft);
* every broker gets ``num.partitions=4``, the suite's default scenario
  (``tests/scenarios/default.json``: auto-created topics have 4 partitions) and nothing else;
* writes ``test.conf`` as librdkafka's own harness does (``LibrdkafkaTestApp.py``:
  ``broker.address.family=v4``, ``test.timeout.multiplier=2``, ``bootstrap.servers``);
* gives the suite a ``KAFKA_PATH`` of shims: ``bin/kafka-topics.sh``, ``bin/kafka-acls.sh`` and
  ``bin/kafka-configs.sh`` map onto ``strata topics`` / ``strata acls`` / ``strata configs``
  (Kafka-protocol admin clients, so the shims serve the Kafka reference too), and
  ``bin/kafka-run-class.sh`` runs the Java helpers of 0098 and 0113 (``tests/java``) on the
  Apache Kafka Java client (``--java-classpath``; without it those parts fail with a clear reason);
* runs the selected test numbers one at a time, each as its own ``test-runner`` process
  (``-L -K -E``: no local-only tests, none marked as known issues, no sockem fault
  injection; not ``-Q``, whose quick mode makes many tests pass without running), as ``TESTS=NNNN``, with a wall-clock cap, and reads each run's JSON
  report (``TEST_REPORT``) for the sub-tests' states and durations;
* prints progress and writes a Markdown table (test, result, seconds, failure reason) per setup
  and a JSON file of the same rows.

``--group-protocol consumer`` sets ``TEST_CONSUMER_GROUP_PROTOCOL=consumer``, which the suite's
``test_conf_init`` turns into ``group.protocol=consumer`` on every consumer (KIP-848).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: The tests named in issue 37, then a broad selection of the quick ones that need a broker:
#: produce/consume, offsets, groups (classic and KIP-848), transactions, admin, compaction.
#: Left out: local-only (-l) tests, the share-consumer tests (KIP-932, brokers >= 4.2), SSL/SASL
#: and ACL-authorization tests (the harness runs PLAINTEXT without an authorizer, like
#: librdkafka's default scenario), 0038 (a throughput measurement), 0042 and 0089/0091/0113
#: beyond the issue's own (each takes minutes).
ISSUE_TESTS = ["0098", "0077", "0137", "0055", "0045", "0081", "0113"]
QUICK_TESTS = [
    "0001", "0002", "0003", "0005", "0007", "0008", "0011", "0012", "0013", "0014", "0015",
    "0017", "0018", "0019", "0020", "0021", "0022", "0026", "0028", "0029", "0030", "0031",
    "0033", "0034", "0035", "0036", "0039", "0040", "0041", "0044", "0048", "0050", "0051",
    "0052", "0053", "0054", "0056", "0057", "0059", "0060", "0061", "0063", "0064", "0065",
    "0067", "0069", "0070", "0073", "0082", "0083", "0084", "0085", "0086", "0090", "0092",
    "0093", "0094", "0099", "0103", "0107", "0110", "0112", "0114", "0118", "0122", "0125",
    "0127", "0129", "0130", "0132", "0140",
]
DEFAULT_TESTS = ISSUE_TESTS + QUICK_TESTS
#: test numbers that take longer than ``--cap`` on two shared cores (0113: 26 sub-tests; 0081: 100+)
LONG_CAPS = {"0113": 1500.0, "0081": 900.0}
RUNNER_FLAGS = ["-L", "-K", "-E", "-p1"]  # never -Q: quick mode turns many tests into no-ops
BROKER_SETS = {"num.partitions": "4"}
KAFKA_VERSION = "4.1.2"  # what the suite is told the broker is (gates version-dependent tests)


@dataclass
class Row:
    """One sub-test's outcome in one setup."""

    setup: str
    number: str
    test: str
    result: str  # PASSED, FAILED, SKIPPED, TIMEOUT, CRASHED
    seconds: float
    reason: str


# -- building ---------------------------------------------------------------------------------

def build_suite(src: Path) -> Path:
    """``tests/test-runner`` of ``src``, built first if missing."""
    runner = src / "tests" / "test-runner"
    if runner.exists():
        return runner
    steps = [(src, "./configure"), (src, "make -j2 libs"), (src / "tests", "make -j2 build")]
    for cwd, cmd in steps:
        print(f"[build] {cwd}: {cmd}", flush=True)
        subprocess.run(["nice", "sh", "-c", cmd], cwd=cwd, check=True,
                       stdout=subprocess.DEVNULL)
    return runner


# -- the KAFKA_PATH shims ---------------------------------------------------------------------

def write_shims(kafka_path: Path, java_classpath: str | None) -> None:
    """``bin/`` scripts the suite runs through ``KAFKA_PATH``, each calling back into this file."""
    bin_dir = kafka_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    me = shlex.quote(str(Path(__file__).resolve()))
    py = shlex.quote(sys.executable)
    for tool in ("kafka-topics.sh", "kafka-acls.sh", "kafka-configs.sh"):
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\nexec {py} {me} shim {tool} \"$@\"\n")
        script.chmod(0o755)
    run_class = bin_dir / "kafka-run-class.sh"
    if java_classpath:
        # tests/java/run-class.sh sets CLASSPATH to its own directory (the compiled helpers)
        cp = shlex.quote(java_classpath)
        run_class.write_text(f"#!/bin/sh\nexec java -cp \"$CLASSPATH:\"{cp} \"$@\"\n")
        libs = kafka_path / "libs"
        libs.mkdir(exist_ok=True)
        for part in java_classpath.split(":"):  # tests/java/Makefile compiles against libs/
            jar = Path(part)
            if jar.name.startswith("kafka-clients-") and jar.suffix == ".jar":
                link = libs / jar.name
                if not link.exists():
                    link.symlink_to(jar)
    else:
        run_class.write_text("#!/bin/sh\necho 'no Java client given (--java-classpath)' >&2\n"
                             "exit 1\n")
    run_class.chmod(0o755)


def _strata(*args: str) -> int:
    """Run a ``strata`` admin command of this checkout; its exit code."""
    cmd = [sys.executable, "-m", "service", *args]
    print("[shim] " + " ".join(shlex.quote(a) for a in cmd[2:]), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=False, cwd=REPO).returncode


def shim_kafka_topics(argv: list[str]) -> int:
    """kafka-topics.sh --create/--alter/--delete as ``strata topics``."""
    p = argparse.ArgumentParser(prog="kafka-topics.sh")
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    for name in ("create", "alter", "delete", "list", "describe"):
        action.add_argument(f"--{name}", action="store_true")
    p.add_argument("--topic")
    p.add_argument("--partitions")
    p.add_argument("--replication-factor")
    p.add_argument("--config", action="append", default=[])
    a = p.parse_args(argv)
    b = ["--bootstrap-server", a.bootstrap_server]
    if a.create:
        more = [f"--config={c}" for c in a.config]
        if a.partitions:
            more += ["--partitions", a.partitions]
        if a.replication_factor:
            more += ["--replication-factor", a.replication_factor]
        return _strata("topics", "create", *b, *more, a.topic)
    if a.alter:
        more = [f"--set={c}" for c in a.config]
        if a.partitions:
            more += ["--partitions", a.partitions]
        return _strata("topics", "alter", *b, *more, a.topic)
    if a.delete:
        return _strata("topics", "delete", *b, a.topic)
    if a.list:
        return _strata("topics", "list", *b)
    return _strata("topics", "describe", *b, *([a.topic] if a.topic else []))


def shim(tool: str, argv: list[str]) -> int:
    """The entry point of the ``bin/`` shims."""
    if tool == "kafka-topics.sh":
        return shim_kafka_topics(argv)
    if tool == "kafka-acls.sh":  # strata acls takes kafka-acls.sh's options
        return _strata("acls", *argv)
    if tool == "kafka-configs.sh":
        return _strata("configs", *argv)
    print(f"no shim for {tool}", file=sys.stderr)
    return 2


# -- brokers ----------------------------------------------------------------------------------

class Brokers:
    """The brokers of one setup: started, waited for, stopped; their log in ``log_path``."""

    def __init__(self, setup: str, work: Path, port: int, kafka_home: Path | None,
                 sets: dict[str, str], authorizer: bool = False) -> None:
        self.setup, self.work, self.port = setup, work, port
        self.kafka_home, self.sets, self.authorizer = kafka_home, sets, authorizer
        self.count = 3 if setup == "three" else 1
        self.bootstrap = ",".join(f"127.0.0.1:{port + k}" for k in range(self.count))
        self.log_path = work / f"brokers-{setup}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        if self.setup == "kafka":
            assert self.kafka_home is not None
            script = REPO.parent / "shared" / "tools" / "kafka-broker" / "run.sh"
            sets = dict(self.sets)
            if self.authorizer:
                sets.update({"authorizer.class.name":
                             "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                             "super.users": "User:ANONYMOUS"})
            overrides = [x for k, v in sets.items() for x in ("--override", f"{k}={v}")]
            env = {**os.environ, "FRESH": "1", "PORT": str(self.port),
                   "CONTROLLER_PORT": str(self.port + 1), "DATA_DIR": str(self.work / "kafka"),
                   "HEAP": "1g"}
            return ["bash", str(script), str(self.kafka_home), *overrides], env, self.kafka_home
        sets = [x for k, v in self.sets.items() for x in ("--set", f"{k}={v}")]
        if self.authorizer:
            sets += ["--acls", "--super-users", "User:ANONYMOUS"]
        cmd = [sys.executable, "-m", "service", "up", "--brokers", str(self.count),
               "--listen", f"127.0.0.1:{self.port}", "--http", f"127.0.0.1:{self.port + 100}",
               "--data-dir", str(self.work / f"strata-{self.setup}"), *sets]
        return cmd, dict(os.environ), REPO

    def start(self) -> None:
        cmd, env, cwd = self.command()
        print(f"[brokers] {self.setup}: {' '.join(cmd)}", flush=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the broker process holds it
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready(deadline=time.monotonic() + 180)
        print(f"[brokers] {self.setup} ready: {self.bootstrap}", flush=True)

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"brokers exited ({self.proc.returncode}); see {self.log_path}")
            if self._ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"brokers not ready in time; see {self.log_path}")

    def _ready(self) -> bool:
        if self.setup == "kafka":  # answers Metadata with a controller
            return _strata_quiet("topics", "list", "--bootstrap-server", self.bootstrap) == 0
        for k in range(self.count):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port + 100 + k}/v1/ready",
                                            timeout=2) as r:
                    if r.status != 200:
                        return False
            except OSError:
                return False
        return True

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _strata_quiet(*args: str) -> int:
    return subprocess.run([sys.executable, "-m", "service", *args], check=False, cwd=REPO,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


# -- running ----------------------------------------------------------------------------------

def write_test_conf(path: Path, bootstrap: str) -> None:
    """test.conf as librdkafka's own harness (LibrdkafkaTestApp.py) writes it."""
    path.write_text("broker.address.family=v4\n"
                    "test.timeout.multiplier=2\n"
                    f"bootstrap.servers={bootstrap}\n"
                    "security.protocol=PLAINTEXT\n")


#: test.c's TEST_FAIL banner; the message is on the next line
_FAIL_LINE = re.compile(r'### Test "([0-9]{4}[^" ]*)( \(([^)]*)\))?" failed at (\S+) at ')


def failure_reasons(output: str) -> dict[str, str]:
    """Test name -> its first failure: sub-test, source location and message."""
    reasons: dict[str, str] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        m = _FAIL_LINE.search(line)
        if m and m.group(1) not in reasons:
            message = lines[i + 1].strip() if i + 1 < len(lines) else ""
            where = f"[{m.group(3)}] " if m.group(3) else ""
            reasons[m.group(1)] = f"{where}{m.group(4)}: {message}"[:400]
    return reasons


def run_number(runner: Path, number: str, env: dict[str, str], setup: str, logs: Path,
               cap_s: float) -> list[Row]:
    """Run every (non-local) sub-test of test ``number``; one row each."""
    report = logs / f"{setup}-{number}.json"
    report.unlink(missing_ok=True)
    out_path = logs / f"{setup}-{number}.log"
    env = {**env, "TESTS": number, "TEST_REPORT": str(report)}
    cap_s = max(cap_s, LONG_CAPS.get(number, 0.0))
    t0 = time.monotonic()
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(["nice", str(runner), *RUNNER_FLAGS], cwd=runner.parent, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(cap_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    took = time.monotonic() - t0
    output = out_path.read_text(errors="replace")
    reasons = failure_reasons(output)
    rows = _rows_from_report(report, setup, number, reasons)
    if code is None:
        return rows or [Row(setup, number, number, "TIMEOUT", round(took, 1),
                            f"killed after {cap_s:.0f} s; {_subtest_progress(output)}")]
    if not rows:
        return [Row(setup, number, number, "CRASHED" if code else "SKIPPED", round(took, 1),
                    _last_line(output) if code else "no sub-test ran")]
    return rows


def _rows_from_report(report: Path, setup: str, number: str,
                      reasons: dict[str, str]) -> list[Row]:
    if not report.exists():
        return []
    try:
        tests = json.loads(report.read_text(errors="replace"), strict=False)["tests"]
    except (ValueError, KeyError):
        return []
    rows = []
    for name, t in tests.items():
        state = t.get("state", "?")
        if not name.startswith(number) or state == "DNS":  # DNS: did not start (-L, -K, ...)
            continue
        reason = reasons.get(name, "") if state == "FAILED" else t.get("extra", "")
        rows.append(Row(setup, number, name, state, round(float(t.get("duration", 0)), 1), reason))
    return rows


_SUBTEST_START = re.compile(r"\[ ([^\]]*?) \]")
_SUBTEST_PASS = re.compile(r"\[ ([^\]]*?): PASS \(")


def _subtest_progress(output: str) -> str:
    """How far a test killed at the cap got: sub-tests passed, failed, and the one running."""
    passed = _SUBTEST_PASS.findall(output)
    started = [s for s in _SUBTEST_START.findall(output) if ": PASS (" not in s]
    failed = len(failure_reasons(output))
    running = started[-1] if started and started[-1] not in passed else "?"
    return f"{len(passed)} sub-tests passed, {failed} failed, running: {running}"


def _last_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def run_setup(args: argparse.Namespace, setup: str, runner: Path, work: Path) -> list[Row]:
    """Start the brokers of ``setup``, run the selection, stop them; the rows."""
    label = setup + ("-kip848" if args.group_protocol == "consumer" else "")
    sets = dict(BROKER_SETS, **dict(s.split("=", 1) for s in args.set))
    brokers = Brokers(setup, work, args.port, args.kafka_home, sets, args.authorizer)
    kafka_path = work / "kafka_path"
    write_shims(kafka_path, args.java_classpath)
    conf = work / f"test-{label}.conf"
    write_test_conf(conf, brokers.bootstrap)
    env = {**os.environ, "RDKAFKA_TEST_CONF": str(conf), "TEST_KAFKA_VERSION": KAFKA_VERSION,
           "KAFKA_PATH": str(kafka_path), "BROKERS": brokers.bootstrap,
           "LD_LIBRARY_PATH": f"{runner.parent.parent / 'src'}:{runner.parent.parent / 'src-cpp'}"}
    if args.group_protocol:
        env["TEST_CONSUMER_GROUP_PROTOCOL"] = args.group_protocol
    if args.subtests:
        env["SUBTESTS"] = args.subtests
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    brokers.start()
    try:
        for i, number in enumerate(args.tests, 1):
            got = run_number(runner, number, env, label, logs, args.cap)
            rows += got
            for r in got:
                print(f"[{label} {i}/{len(args.tests)}] {r.test}: {r.result} {r.seconds:.1f}s "
                      f"{r.reason}", flush=True)
            partial = work / f"partial-{label}.json"  # a run stopped early still has its rows
            partial.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
            if brokers.proc is not None and brokers.proc.poll() is not None:
                print(f"[{label}] brokers exited; restarting", flush=True)
                brokers.start()
    finally:
        brokers.stop()
    return rows


def markdown(rows: list[Row]) -> str:
    """A results table per setup, with its pass/fail counts."""
    out = []
    for setup in dict.fromkeys(r.setup for r in rows):
        mine = [r for r in rows if r.setup == setup]
        counts = {s: sum(r.result == s for r in mine) for s in dict.fromkeys(r.result for r in mine)}
        out.append(f"### {setup}: " + ", ".join(f"{n} {s.lower()}" for s, n in counts.items()))
        out.append("")
        out.append("| test | result | seconds | failure reason |")
        out.append("|---|---|---:|---|")
        for r in mine:
            reason = r.reason.replace("|", "\\|") if r.result not in ("PASSED",) else ""
            out.append(f"| {r.test} | {r.result} | {r.seconds:.1f} | {reason} |")
        out.append("")
    return "\n".join(out)


def merged_table(paths: list[Path]) -> str:
    """One row per sub-test, one column per setup, from the JSON files of several runs (a later
    file's row for the same setup and test replaces an earlier one: a re-run)."""
    cells: dict[str, dict[str, Row]] = {}
    for path in paths:
        for raw in json.loads(path.read_text()):
            row = Row(**raw)
            if row.result == "SKIPPED" and not row.reason.strip():
                row.reason = "skipped by the test"
            if row.test != row.number:  # a re-run's sub-test replaces a capped run's bare row
                cells.get(row.number, {}).pop(row.setup, None)
            else:  # a re-run capped before its report replaces the first run's sub-tests
                for test, by_setup in cells.items():
                    if test.startswith(row.number):
                        by_setup.pop(row.setup, None)
            cells.setdefault(row.test, {})[row.setup] = row
    cells = {test: by for test, by in cells.items() if by}
    setups = list(dict.fromkeys(s for by_setup in cells.values() for s in by_setup))
    out = ["| test | " + " | ".join(setups) + " |", "|---|" + "---|" * len(setups)]
    for test in sorted(cells):
        by_setup = cells[test]
        if all(r.result == "SKIPPED" for r in by_setup.values()):
            continue
        out.append(f"| {test} | " + " | ".join(
            f"{by_setup[s].result} {by_setup[s].seconds:.0f}s" if s in by_setup else "not run"
            for s in setups) + " |")
    counts = []
    for s in setups:
        rows = [by[s] for by in cells.values() if s in by]
        counts.append(f"{s}: " + ", ".join(
            f"{sum(r.result == k for r in rows)} {k.lower()}" for k in ("PASSED", "FAILED", "TIMEOUT")))
    return "\n".join(out) + "\n\n" + "; ".join(counts) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["shim"]:
        return shim(argv[1], argv[2:])
    if argv[:1] == ["merge"]:  # merge RESULTS.json...: one table, a column per setup
        print(merged_table([Path(a) for a in argv[1:]]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--src", type=Path, default=Path("/work/librdkafka-src"),
                   help="librdkafka source tree (tag v2.15.0)")
    p.add_argument("--setup", action="append", choices=["single", "three", "kafka"],
                   help="repeatable; default: single and three")
    p.add_argument("--group-protocol", choices=["classic", "consumer"], default=None,
                   help="TEST_CONSUMER_GROUP_PROTOCOL; consumer = KIP-848")
    p.add_argument("--tests", default=",".join(DEFAULT_TESTS),
                   help="comma-separated test numbers (default: the documented selection)")
    p.add_argument("--subtests", default=None,
                   help="SUBTESTS: only the sub-tests whose name contains this")
    p.add_argument("--cap", type=float, default=420.0, help="seconds one test number may take")
    p.add_argument("--port", type=int, default=21092,
                   help="first Kafka port (below the ephemeral range; HTTP ports are 100 above)")
    p.add_argument("--set", action="append", default=[], help="more broker configs KEY=VALUE")
    p.add_argument("--authorizer", action="store_true",
                   help="ACLs on (Kafka's StandardAuthorizer, strata up --acls) with User:ANONYMOUS "
                        "a super user: 0081's CreateAcls/DescribeAcls/DeleteAcls need an authorizer")
    p.add_argument("--kafka-home", type=Path, default=Path("/work/kafka-4.1.2"))
    p.add_argument("--java-classpath", default=None,
                   help="Apache Kafka Java client and its dependencies (0098, 0113's Java "
                        "helpers), e.g. /work/kafka-4.1.2/libs/kafka-clients-4.1.2.jar:"
                        "/work/kafka-4.1.2/deplibs/*")
    p.add_argument("--work", type=Path, default=None, help="scratch dir (default: a new tmp dir)")
    p.add_argument("--out", type=Path, default=None, help="Markdown results (default: WORK/results.md)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the brokers on the way out
    args.tests = [t.strip() for t in args.tests.split(",") if t.strip()]
    work = args.work or Path(tempfile.mkdtemp(prefix="librdkafka-suite-"))
    work.mkdir(parents=True, exist_ok=True)
    runner = build_suite(args.src)
    rows: list[Row] = []
    for setup in args.setup or ["single", "three"]:
        rows += run_setup(args, setup, runner, work)
    table = markdown(rows)
    out = args.out or work / "results.md"
    out.write_text(table + "\n")
    out.with_suffix(".json").write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    print(table)
    print(f"results: {out} (logs: {work / 'logs'})")
    return 0 if all(r.result in ("PASSED", "SKIPPED") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
