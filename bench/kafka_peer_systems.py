"""The two systems ``bench/kafka_peer.py`` compares, each as one or three server processes:
Strata (``python -m service up``, bench/foundation.py's BrokerProcess; three brokers on
one ``file://`` bucket as bench/cluster.py starts them) and Apache Kafka 4.1.2 (KRaft,
combined broker+controller nodes started by ``shared/tools/kafka-broker/run.sh``, which
execs the JVM, so the pid we hold is the broker's).

A System answers the questions every workload asks: where to connect, and how much CPU
and memory its server processes have used: CPU from a cgroup of the system's own
(bench/cpu_groups.py: nanoseconds, every thread) where one can be made, else from /proc
(clock ticks), memory from /proc, summed over the processes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from cluster import start_cluster  # noqa: E402
from cpu_groups import CpuGroup  # noqa: E402
from foundation import BrokerProcess, free_port, log  # noqa: E402
from peers import proc_cpu, proc_cpu_split  # noqa: E402  (utime, stime of every thread of a pid, from /proc)

KAFKA_HOME = Path(os.environ.get("KAFKA_HOME", "/work/kafka-4.1.2"))
RUN_SH = Path(os.environ.get("KAFKA_RUN_SH", "/work/shared/tools/kafka-broker/run.sh"))
KAFKA_CLIENT_CP = f"{KAFKA_HOME}/libs/kafka-clients-4.1.2.jar:{KAFKA_HOME}/deplibs/*"
#: settings both systems get alike: 1 GiB segments (as BrokerProcess), no group join delay, files
#: of deleted segments and topics unlinked 1 s after (so that the bench can wait for it between runs)
STRATA_SETS = {"group.initial.rebalance.delay.ms": "0", "log.segment.delete.delay.ms": "1000"}
KAFKA_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "log.segment.bytes": "1073741824",
                   "log.segment.delete.delay.ms": "1000"}


def kafka_missing() -> str | None:
    """Why Kafka 4.1.2 cannot be started here (what to do about it), or None when it can."""
    jar = KAFKA_HOME / "libs" / "kafka-clients-4.1.2.jar"
    if not jar.is_file():
        return (f"Apache Kafka 4.1.2 is not built at KAFKA_HOME={KAFKA_HOME} (no {jar.name} in its libs/): build it "
                "with shared/tools/kafka-broker/build.sh (its README.txt; about 20 minutes) and set KAFKA_HOME "
                "to the directory it made")
    if not RUN_SH.is_file():
        return f"Kafka's start script is not at {RUN_SH}: set KAFKA_RUN_SH to shared/tools/kafka-broker/run.sh"
    if shutil.which("java") is None:
        return "no java on PATH: Kafka 4.1.2 and its Java client need a JDK (17 or later)"
    return None


def proc_rss_mib(pid: int, field: str = "VmRSS:") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0


class KafkaNode:
    """One Kafka 4.1.2 node (broker+controller) under ``data_dir``, in the foreground of run.sh."""

    def __init__(self, data_dir: Path, log_path: Path, *, node_id: int = 1, heap: str = "1g",
                 overrides: dict[str, str] | None = None) -> None:
        self.data_dir, self.log_path, self.node_id = data_dir, log_path, node_id
        self.port, self.controller_port = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.env = {"HEAP": heap, "PORT": str(self.port), "CONTROLLER_PORT": str(self.controller_port),
                    "DATA_DIR": str(data_dir)}
        self.overrides = {**KAFKA_OVERRIDES, **(overrides or {})}
        self.proc: subprocess.Popen | None = None

    def add_tls_listener(self, keystore: Path) -> str:
        """An SSL listener beside the plaintext one, its key and chain from one PEM file; its bootstrap."""
        tls_port = free_port()
        plain = f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
        self.overrides.update({
            "listeners": f"{plain},SSL://127.0.0.1:{tls_port}",
            "advertised.listeners": f"{plain},SSL://127.0.0.1:{tls_port}",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)})
        return f"127.0.0.1:{tls_port}"

    @property
    def cmd(self) -> list[str]:
        extra = [a for k, v in self.overrides.items() for a in ("--override", f"{k}={v}")]
        return ["bash", str(RUN_SH), str(KAFKA_HOME), *extra]

    def command_line(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.cmd)}"

    def start(self, timeout: float = 120) -> None:
        log(f"starting Kafka node {self.node_id}: {self.command_line()}")
        self._log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(self.cmd, env={**os.environ, **self.env}, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Kafka Server started" in self.log_path.read_text(errors="replace"):
                log(f"Kafka node {self.node_id} pid {self.proc.pid} ready on {self.bootstrap}")
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"Kafka exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        raise SystemExit(f"Kafka not ready within {timeout} s:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> int | None:
        """SIGTERM (a clean shutdown takes ~4 s); 0 after one."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._log.close()
        return 0 if rc == 143 else rc  # the JVM exits 143 after its SIGTERM hook shut the broker down


def _format_cluster(nodes: list[KafkaNode]) -> None:
    """Format three nodes' log dirs with one cluster id and a static quorum of all three: what
    run.sh does for one node, which it cannot do for several (it formats each with its own id)."""
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    cp = f"{KAFKA_HOME}/libs/*"
    tools_log = f"-Dlog4j2.configurationFile={KAFKA_HOME}/config/tools-log4j2.yaml"
    cluster_id = subprocess.run(["java", "-Xmx256m", "-cp", cp, tools_log, "kafka.tools.StorageTool",
                                 "random-uuid"], capture_output=True, text=True, check=True).stdout.strip()
    for n in nodes:
        (n.data_dir / "data").mkdir(parents=True, exist_ok=True)
        props = n.data_dir / "format.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller", f"node.id={n.node_id}", f"controller.quorum.voters={voters}",
            f"listeners=PLAINTEXT://127.0.0.1:{n.port},CONTROLLER://127.0.0.1:{n.controller_port}",
            "controller.listener.names=CONTROLLER", f"log.dirs={n.data_dir / 'data'}", ""]))
        subprocess.run(["java", "-Xmx256m", "-cp", cp, tools_log, "kafka.tools.StorageTool", "format",
                        "-t", cluster_id, "-c", str(props)], capture_output=True, text=True, check=True)
        n.env["QUORUM"] = "static"
        n.overrides.update({"node.id": str(n.node_id), "controller.quorum.voters": voters})


class System:
    """One side of the comparison: its server processes and a bootstrap string."""

    def __init__(self, key: str, name: str, servers: list, tls_bootstrap: str | None = None) -> None:
        self.key, self.name, self.servers, self.tls_bootstrap = key, name, servers, tls_bootstrap
        self.cpu_group = CpuGroup.create(f"strata-bench-{key}")
        if self.cpu_group is not None:
            try:
                for pid in self.pids:
                    self.cpu_group.add(pid)
            except OSError as exc:  # e.g. a cgroup v2 tree that does not let us move processes
                log(f"CPU from /proc, not {self.cpu_group.source}: {exc}")
                self.cpu_group.remove(timeout=0)
                self.cpu_group = None

    @property
    def cpu_source(self) -> str:
        return self.cpu_group.source if self.cpu_group is not None else "/proc/PID/stat (clock ticks)"

    @property
    def bootstrap(self) -> str:
        return ",".join(s.bootstrap for s in self.servers)

    @property
    def proc(self) -> subprocess.Popen:
        """The first server process (what bench/foundation.py's helpers profile)."""
        return self.servers[0].proc

    @property
    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.servers]

    def cpu_seconds(self) -> float:
        if self.cpu_group is not None:
            return self.cpu_group.usage()[0]
        return sum(proc_cpu(p) for p in self.pids)

    def user_cpu_seconds(self) -> float:
        """The servers' own work, without what the kernel did for them (:func:`proc_cpu_split`)."""
        if self.cpu_group is not None:
            return self.cpu_group.usage()[1]
        return sum(proc_cpu_split(p)[0] for p in self.pids)

    def rss_mib(self) -> float:
        return sum(proc_rss_mib(p) for p in self.pids)

    def log_dirs(self) -> list[Path]:
        return [s.data_dir / ("data" if isinstance(s, KafkaNode) else "logs") for s in self.servers]

    def wait_deleted(self, topic: str, timeout: float = 120) -> float:
        """Seconds until no server's log dir holds a directory of ``topic``: its partitions, or
        them renamed for deletion (``<topic>-<p>.<id>-delete`` on both); SystemExit after ``timeout``."""
        pattern = re.compile(rf"{re.escape(topic)}-\d+($|\.)")
        started = time.monotonic()
        while True:
            left = [d for root in self.log_dirs() if root.is_dir() for d in os.listdir(root) if pattern.match(d)]
            if not left:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{self.name}: {left[:3]} still on disk {timeout:.0f} s after deleting {topic}")
            time.sleep(0.1)

    def peak_rss_mib(self) -> float:
        return sum(proc_rss_mib(p, "VmHWM:") for p in self.pids)

    def commands(self) -> list[str]:
        return [s.command_line() if isinstance(s, KafkaNode) else shlex.join(s.cmd) for s in self.servers]

    def stop(self) -> list[int | None]:
        """SIGTERM to every server at once (a Kafka node stopped after its peers waits for a quorum
        that is gone), then their exit codes."""
        with ThreadPoolExecutor(len(self.servers)) as pool:
            codes = list(pool.map(lambda s: s.stop(), self.servers))
        if self.cpu_group is not None:
            self.cpu_group.remove()
        return codes


def start_strata(work: Path, size: int, *, pki=None, tiered: dict | None = None) -> System:
    """``pki`` (tests/security_fixtures.py's Pki): an SSL listener too; ``tiered``: a ``file://``
    bucket under ``work`` and these settings (tiered storage)."""
    work.mkdir(parents=True, exist_ok=True)
    if size == 1:
        b = BrokerProcess(work / "strata", work / "strata.log")
        tls = None
        if pki is not None:
            tls = f"127.0.0.1:{free_port()}"
            at = b.cmd.index("--listen")
            b.cmd[at:at + 2] = ["--listeners", f"PLAINTEXT://127.0.0.1:{b.port},SSL://{tls}",
                                "--ssl-cert", str(pki.server_cert), "--ssl-key", str(pki.server_key)]
        if tiered is not None:
            b.cmd += ["--object-store", (work / "bucket").as_uri()]
        for key, value in {**STRATA_SETS, **(tiered or {})}.items():
            b.cmd += ["--set", f"{key}={value}"]
        b.start()
        return System("strata", "Strata", [b], tls)
    brokers = start_cluster(work / f"strata{size}", size, STRATA_SETS)
    return System("strata", f"Strata ({size} brokers)", brokers)


def start_kafka(work: Path, size: int, heap: str = "1g", *, pki=None) -> System:
    work.mkdir(parents=True, exist_ok=True)
    tls = None
    if size == 1:
        nodes = [KafkaNode(work / "kafka", work / "kafka.log", heap=heap, overrides={})]
        nodes[0].env["FRESH"] = "1"
        if pki is not None:
            tls = nodes[0].add_tls_listener(pki.keystore)
    else:
        replicated = {"offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                      "transaction.state.log.min.isr": "2"}
        nodes = [KafkaNode(work / f"kafka{size}-{i}", work / f"kafka{size}-{i}.log", node_id=i, heap=heap,
                           overrides=replicated) for i in range(1, size + 1)]
        _format_cluster(nodes)
    for n in nodes:
        n.start()
    for n in nodes:
        n.wait_ready()
    return System("kafka", "Kafka 4.1.2" + (f" ({size} brokers)" if size > 1 else ""), nodes, tls)
