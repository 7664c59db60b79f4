"""The README's "Using it" sequence runs as written against a fresh broker (but the perf tools'
million records and kcat), and the CLI explains an empty broker and a missing group."""

from __future__ import annotations

import re
import shlex
from typing import Any

from tests.conftest import BrokerFactory
from tests.service.cli.helpers import REPO_ROOT, fails_cleanly, ok, strata


def _readme_commands() -> list[tuple[list[str], str | None]]:
    """(strata arguments, stdin) of each line of the README's first sh block under "Using it"."""
    text = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"## Using it\n\n```sh\n(.*?)```", text, re.DOTALL)
    assert block is not None, "README.md has no sh block under '## Using it'"
    out: list[tuple[list[str], str | None]] = []
    for line in block.group(1).splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        stdin = None
        piped = re.match(r"printf '([^']*)' \| (.*)", line)
        if piped:
            stdin, line = piped.group(1).encode().decode("unicode_escape"), piped.group(2)
        words = shlex.split(line)
        if words[0] != "strata" or words[1] == "perf":
            continue
        out.append((words[1:], stdin))
    return out


def test_the_readme_sequence_works_as_written(start_broker: BrokerFactory) -> None:
    b = start_broker(sets={"group.initial.rebalance.delay.ms": "0"})
    env = {"STRATA_BOOTSTRAP": b.bootstrap}
    listed = ok(strata("groups", "list", env=env))  # nothing yet: said so, on stderr
    assert listed.stdout == "" and "no consumer groups on" in listed.stderr
    assert "strata consume TOPIC --group NAME" in listed.stderr
    line = fails_cleanly(strata("groups", "describe", "my-group", env=env))
    assert "does not exist" in line and "strata consume TOPIC --group my-group" in line

    commands = _readme_commands()
    assert [c[0][:2] for c in commands] == [["topics", "create"], ["produce", "events"],
                                            ["consume", "events"], ["consume", "events"],
                                            ["topics", "describe"], ["groups", "describe"]]
    runs: list[Any] = []
    for args, stdin in commands:
        # the broker's admin API is not on the default port here: the documented variable
        runs.append(ok(strata(*args, stdin=stdin, env={**env, "STRATA_ADMIN_URL": b.admin_url})))
    _, _, consumed, in_group, described, group_described = runs
    assert sorted(consumed.stdout.splitlines()) == ["k1\thello", "k2\tworld"]  # 2 partitions: any order
    assert len(in_group.stdout.splitlines()) == 1  # --max-messages 1
    assert "consumed 1 records from events as group my-group, offsets committed" in in_group.stderr
    assert "RemoteStart:" in described.stdout and "note:" not in described.stderr
    group = group_described.stdout.splitlines()
    assert group[0].startswith("Group my-group: state Empty"), group
    rows = [r.split() for r in group[2:]]  # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
    assert sum(int(r[3]) for r in rows) + sum(int(r[5]) for r in rows) == sum(int(r[4]) for r in rows)
    assert sum(int(r[5]) for r in rows) <= 1
    assert "my-group" in ok(strata("groups", "list", env=env)).stdout.split()

    # without the admin URL, `topics describe` says how to give it
    bare = ok(strata("topics", "describe", "events", env=env))
    assert "RemoteStart:" not in bare.stdout
    assert "pass --admin-url http://HOST:PORT or set STRATA_ADMIN_URL" in bare.stderr, bare.stderr
