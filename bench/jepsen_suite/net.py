"""The network the brokers live on, and the cuts a nemesis makes in it.

Two implementations of one seam (:class:`Network`):

* :class:`NetnsNetwork` (root, ``ip`` and ``nft``): each broker in its own Linux network
  namespace ``sj<tag>b<N>`` with address ``10.77.<X>.N``, a veth pair to a bridge
  ``sj<tag>br`` in the root namespace whose address ``10.77.<X>.254`` carries the S3
  server and the clients. A cut is an nftables drop inside the broker's namespace (input
  and output, so both directions): from its peers' addresses, or from the S3 server's
  port. Packets are dropped, nothing is reset: both ends see a silent network.
* :class:`ProxyNetwork` (no root): brokers on loopback; the listener brokers use between
  themselves (``REPLICATION``) is advertised behind a :class:`~.proxy.PairProxy` per
  broker, which learns the calling broker from the client id of the connection's first
  request (``strata-broker-N``), so a cut between two brokers is one pair in both
  directions; each broker reaches S3 through a proxy of its own, cut by partitioning it.

Every name made here carries the run's tag, and :meth:`close` removes exactly those.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from typing import Protocol

from .proxy import Blocks, PairProxy

__all__ = ["Network", "NetnsNetwork", "ProxyNetwork", "netns_available"]

KAFKA_PORT = 9092
HTTP_PORT = 9644


def netns_available() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"sjp{os.getpid() % 0xFFFF:04x}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Network(Protocol):
    kind: str
    #: the address clients and the S3 server use on this network
    s3_host: str

    def broker_command(self, node: int, cmd: list[str]) -> list[str]: ...
    def broker_args(self, node: int) -> tuple[list[str], dict[str, str]]: ...
    def bootstrap(self, node: int) -> str: ...
    def admin_url(self, node: int) -> str: ...
    def s3_endpoint(self, node: int) -> str: ...
    def set_s3_port(self, port: int) -> None: ...
    def isolate(self, node: int, peers: list[int]) -> None: ...
    def cut_bucket(self, node: int) -> None: ...
    def heal(self, node: int | None = None) -> None: ...
    def close(self) -> None: ...


def _run(*cmd: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


class NetnsNetwork:
    """One namespace per broker on a bridge; cuts are nftables drops (module docstring)."""

    kind = "netns"

    def __init__(self, size: int) -> None:
        self.size = size
        self.tag = f"{os.getpid() % 0xFFFF:04x}"
        self.subnet = self._free_subnet()
        self.s3_host = f"{self.subnet}.254"
        self.s3_port = 0
        self.bridge = f"sj{self.tag}br"
        self._made_ns: list[str] = []
        self._made_links: list[str] = []
        #: node -> (peers cut off, bucket cut off)
        self._cuts: dict[int, tuple[list[int], bool]] = {}
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _free_subnet() -> str:
        used = _run("ip", "-4", "-o", "addr")
        start = os.getpid() % 200
        for i in range(200):
            x = (start + i) % 200 + 10
            if f" 10.77.{x}." not in used:
                return f"10.77.{x}"
        raise RuntimeError("no free 10.77.X.0/24 subnet")

    def ns(self, node: int) -> str:
        return f"sj{self.tag}b{node}"

    def host(self, node: int) -> str:
        return f"{self.subnet}.{node}"

    def _build(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made_links.append(self.bridge)
        _run("ip", "addr", "add", f"{self.s3_host}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for n in range(1, self.size + 1):
            ns, outside, inside = self.ns(n), f"sj{self.tag}h{n}", f"sj{self.tag}n{n}"
            _run("ip", "netns", "add", ns)
            self._made_ns.append(ns)
            _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            self._made_links.append(outside)
            _run("ip", "link", "set", inside, "netns", ns)
            _run("ip", "link", "set", outside, "master", self.bridge)
            _run("ip", "link", "set", outside, "up")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.host(n)}/24", "dev", inside)
            _run("ip", "netns", "exec", ns, "ip", "link", "set", inside, "up")
            self._apply(n)

    def _apply(self, node: int) -> None:
        """Rewrite the node's table from its cuts, atomically (one ``nft -f``)."""
        peers, bucket = self._cuts.get(node, ([], False))
        rules_in, rules_out = [], []
        for p in peers:
            rules_in.append(f"ip saddr {self.host(p)} drop")
            rules_out.append(f"ip daddr {self.host(p)} drop")
        if bucket:
            rules_in.append(f"ip saddr {self.s3_host} tcp sport {self.s3_port} drop")
            rules_out.append(f"ip daddr {self.s3_host} tcp dport {self.s3_port} drop")
        script = "table inet sjepsen\ndelete table inet sjepsen\ntable inet sjepsen {\n"
        script += "  chain in { type filter hook input priority 0; policy accept;\n"
        script += "".join(f"    {r}\n" for r in rules_in) + "  }\n"
        script += "  chain out { type filter hook output priority 0; policy accept;\n"
        script += "".join(f"    {r}\n" for r in rules_out) + "  }\n}\n"
        _run("ip", "netns", "exec", self.ns(node), "nft", "-f", "-", stdin=script)

    # -- the seam ---------------------------------------------------------------------------

    def broker_command(self, node: int, cmd: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(node), *cmd]

    def broker_args(self, node: int) -> tuple[list[str], dict[str, str]]:
        return ["--listen", self.bootstrap(node), "--http", f"{self.host(node)}:{HTTP_PORT}"], {}

    def bootstrap(self, node: int) -> str:
        return f"{self.host(node)}:{KAFKA_PORT}"

    def admin_url(self, node: int) -> str:
        return f"http://{self.host(node)}:{HTTP_PORT}"

    def s3_endpoint(self, node: int) -> str:
        return f"http://{self.s3_host}:{self.s3_port}"

    def set_s3_port(self, port: int) -> None:
        self.s3_port = port

    def isolate(self, node: int, peers: list[int]) -> None:
        self._cuts[node] = (list(peers), self._cuts.get(node, ([], False))[1])
        self._apply(node)

    def cut_bucket(self, node: int) -> None:
        self._cuts[node] = (self._cuts.get(node, ([], False))[0], True)
        self._apply(node)

    def heal(self, node: int | None = None) -> None:
        for n in ([node] if node is not None else list(self._cuts)):
            if self._cuts.pop(n, None) is not None:
                self._apply(n)

    def close(self) -> None:
        for ns in self._made_ns:
            _run("ip", "netns", "del", ns, check=False)
        for link in reversed(self._made_links):
            _run("ip", "link", "del", link, check=False)
        self._made_ns.clear()
        self._made_links.clear()


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ProxyNetwork:
    """Brokers on loopback, their links and their S3 behind proxies (module docstring)."""

    kind = "proxy"
    s3_host = "127.0.0.1"

    def __init__(self, size: int, free_port: object = None) -> None:
        self.size = size
        self._free_port = free_port if callable(free_port) else _free_loopback_port
        self.ports = {n: self._free_port() for n in range(1, size + 1)}
        self.http_ports = {n: self._free_port() for n in range(1, size + 1)}
        self.repl_ports = {n: self._free_port() for n in range(1, size + 1)}
        self.blocks = Blocks()
        self.peer_proxies = {n: PairProxy(self.repl_ports[n], n, self._free_port(), self.blocks)
                             for n in self.ports}
        self.s3_proxies: dict[int, PairProxy] = {}

    def set_s3_port(self, port: int) -> None:
        for p in self.s3_proxies.values():
            p.close()
        self.s3_proxies = {n: PairProxy(port, 0, self._free_port(), source=n) for n in self.ports}

    def broker_command(self, node: int, cmd: list[str]) -> list[str]:
        return cmd

    def broker_args(self, node: int) -> tuple[list[str], dict[str, str]]:
        port, repl, proxy = self.ports[node], self.repl_ports[node], self.peer_proxies[node].port
        args = ["--listeners", f"PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{repl}",
                "--http", f"127.0.0.1:{self.http_ports[node]}"]
        sets = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{proxy}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
                "inter.broker.listener.name": "REPLICATION"}
        return args, sets

    def bootstrap(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def admin_url(self, node: int) -> str:
        return f"http://127.0.0.1:{self.http_ports[node]}"

    def s3_endpoint(self, node: int) -> str:
        return f"http://127.0.0.1:{self.s3_proxies[node].port}"

    def isolate(self, node: int, peers: list[int]) -> None:
        for p in peers:
            self.blocks.block(node, p)

    def cut_bucket(self, node: int) -> None:
        self.s3_proxies[node].partition()

    def heal(self, node: int | None = None) -> None:
        self.blocks.unblock(node)
        for p in list(self.peer_proxies.values()) + list(self.s3_proxies.values()):
            p.heal_held()
        for n, p in self.s3_proxies.items():
            if node is None or n == node:
                p.heal()

    def close(self) -> None:
        self.blocks.unblock(None)
        for p in list(self.peer_proxies.values()) + list(self.s3_proxies.values()):
            p.close()
