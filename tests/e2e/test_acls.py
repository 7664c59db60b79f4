"""ACLs with Kafka's authorizer semantics on a real broker: each API answers Kafka's
authorization error codes, Metadata hides what a principal may not describe, prefixed
ACLs and DENY-over-ALLOW behave as Kafka's, and ``strata acls`` manages them.

One broker for the module (``--acls``, ``super.users=User:admin``) with a SASL_PLAINTEXT
listener; ``admin`` comes from ``STRATA_BOOTSTRAP_USER``, ``alice`` and ``bob`` are made
by admin. Requests are sent raw (tests/e2e/rawkafka.py, kafka-python's schemas) over
connections authenticated as each user, so every error code is seen as sent.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.admin.configs import DescribeConfigsRequest
from kafka.protocol.consumer import JoinGroupRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import EndTxnRequest, InitProducerIdRequest

from tests.conftest import REPO_ROOT, BrokerProcess, free_port, subprocess_env
from tests.e2e import rawkafka as rk
from tests.e2e.helpers import topic_name, wait_until
from tests.e2e.secure_clients import Security, roundtrip, sasl_login
from tests.security_fixtures import Pki

ADMIN, ALICE, BOB = ("admin", "admin-pw"), ("alice", "alice-pw"), ("bob", "bob-pw")


class AclBroker:
    def __init__(self, process: BrokerProcess, port: int, admin_config: str) -> None:
        self.process, self.port, self.admin_config = process, port, admin_config
        self.bootstrap = f"127.0.0.1:{port}"

    def strata(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run([sys.executable, "-m", "service", *args, "-b", self.bootstrap, "--command-config",
                               self.admin_config], cwd=REPO_ROOT, env=subprocess_env(), input=stdin,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done
        return done.stdout

    def login(self, who: tuple[str, str]) -> Any:
        return sasl_login(self.bootstrap, *who)

    def create_topic(self, prefix: str) -> str:
        name = topic_name(prefix)
        self.strata("topics", "create", name)
        return name


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[AclBroker]:
    port = free_port()
    process = BrokerProcess(
        tmp_path_factory.mktemp("acls") / "data", free_port(),
        listeners=f"PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{port}",
        args=["--acls", "--super-users", "User:admin", "--ssl-cert", str(pki.server_cert),
              "--ssl-key", str(pki.server_key), "--ssl-ca", str(pki.ca)],
        sets={"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
              "transaction.state.log.num.partitions": "1", "auto.create.topics.enable": "false",
              # the HTTP listener: TLS, Basic (the SCRAM users) or client certificates, the same ACLs
              "http.ssl.enable": "true", "http.ssl.client.auth": "requested",
              "http.authentication.methods": "basic,mtls",
              "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,.*$/$1/,DEFAULT"},
        env={"STRATA_BOOTSTRAP_USER": ":".join(ADMIN)},
    )
    process.start()
    try:
        config = process.data_dir.parent / "admin.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          f"sasl.username={ADMIN[0]}\nsasl.password={ADMIN[1]}\n")
        broker = AclBroker(process, port, str(config))
        for user, password in (ALICE, BOB):
            broker.strata("users", "create", user, "--password-file", "-", stdin=password)
        yield broker
    finally:
        process.kill()


def _produce(conn: Any, topic: str) -> int:
    payload = conn.call(rk.API_PRODUCE, 3, rk.produce_v3_body(topic, 0, rk.record_batch([b"v"])))
    return rk.parse_produce_v3(payload)[1][0].error_code


def _fetch(conn: Any, topic: str) -> int:
    return rk.parse_fetch_v4(conn.call(rk.API_FETCH, 4, rk.fetch_v4_body(topic, 0, 0)))[1][0].error_code


def test_topic_acls_gate_produce_fetch_and_metadata(acl_broker: AclBroker) -> None:
    topic = acl_broker.create_topic("acl-topic")
    with acl_broker.login(ALICE) as alice:
        assert _produce(alice, topic) == 29  # TOPIC_AUTHORIZATION_FAILED
        assert _fetch(alice, topic) == 29
        named = rk.call_api(alice, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 4)
        assert [(t.name, t.error_code) for t in named.topics] == [(topic, 29)]
        everything = rk.call_api(alice, MetadataRequest(topics=None), 4)
        assert topic not in {t.name for t in everything.topics}  # not even listed
    acl_broker.strata("acls", "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", topic)
    with acl_broker.login(ALICE) as alice:
        assert _produce(alice, topic) == 0
        assert _fetch(alice, topic) == 29  # WRITE is not READ
        everything = rk.call_api(alice, MetadataRequest(topics=None), 4)
        assert topic in {t.name for t in everything.topics}  # WRITE implies DESCRIBE
    with acl_broker.login(ADMIN) as admin:  # a super user needs no ACL
        assert _fetch(admin, topic) == 0


def test_prefixed_allow_and_deny_over_allow_behave_as_kafkas(acl_broker: AclBroker) -> None:
    prefix = topic_name("pay")
    payments, payroll = acl_broker.create_topic(f"{prefix}-ments"), acl_broker.create_topic(f"{prefix}-roll")
    acl_broker.strata("acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                      "--topic", prefix, "--resource-pattern-type", "prefixed")
    acl_broker.strata("acls", "--add", "--deny-principal", "User:alice", "--operation", "Read", "--topic", payroll)
    with acl_broker.login(ALICE) as alice:
        assert _fetch(alice, payments) == 0
        assert _fetch(alice, payroll) == 29  # the DENY wins over the prefixed ALLOW
        seen = {t.name: t.error_code for t in rk.call_api(alice, MetadataRequest(topics=None), 4).topics}
        assert seen.get(payments) == 0 and seen.get(payroll) == 0  # DENY READ does not deny DESCRIBE
    with acl_broker.login(BOB) as bob:  # the ACLs name alice only
        assert _fetch(bob, payments) == 29
    listing = acl_broker.strata("acls", "--list", "--topic", payroll, "--resource-pattern-type", "match")
    assert f"TOPIC:LITERAL:{payroll} DENY User:alice from * to READ" in listing
    assert f"TOPIC:PREFIXED:{prefix} ALLOW User:alice from * to READ" in listing  # MATCH shows the prefix too
    acl_broker.strata("acls", "--remove", "--deny-principal", "User:alice", "--operation", "Read", "--topic", payroll)
    with acl_broker.login(ALICE) as alice:
        assert _fetch(alice, payroll) == 0


def test_group_acls_gate_the_group_apis(acl_broker: AclBroker) -> None:
    group = topic_name("acl-group")
    join = JoinGroupRequest(group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                            protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    fetch = OffsetFetchRequest(group_id=group, topics=None)
    with acl_broker.login(ALICE) as alice:
        assert rk.call_api(alice, join, 5).error_code == 30  # GROUP_AUTHORIZATION_FAILED
        assert rk.call_api(alice, fetch, 5).error_code == 30
    acl_broker.strata("acls", "--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", group)
    with acl_broker.login(ALICE) as alice:
        assert rk.call_api(alice, join, 5).error_code == 79  # MEMBER_ID_REQUIRED: in, as the protocol goes
        assert rk.call_api(alice, fetch, 5).error_code == 0  # READ implies DESCRIBE


def test_cluster_and_transactional_id_acls(acl_broker: AclBroker) -> None:
    txn = topic_name("acl-txn")
    broker_configs = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="1", configuration_keys=None)])
    with acl_broker.login(BOB) as bob:
        assert rk.call_api(bob, broker_configs, 1).results[0].error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
        idempotent = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
        assert rk.call_api(bob, idempotent, 1).error_code == 31  # no IDEMPOTENT_WRITE, no WRITE on any topic
        transactional = InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=60_000)
        assert rk.call_api(bob, transactional, 1).error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        end = EndTxnRequest(transactional_id=txn, producer_id=1, producer_epoch=0, committed=True)
        assert rk.call_api(bob, end, 1).error_code == 53
    acl_broker.strata("acls", "--add", "--allow-principal", "User:bob", "--operation", "Write",
                      "--transactional-id", txn)
    acl_broker.strata("acls", "--add", "--allow-principal", "User:bob", "--operation", "DescribeConfigs", "--cluster")
    with acl_broker.login(BOB) as bob:
        assert rk.call_api(bob, broker_configs, 1).results[0].error_code == 0
        allowed = InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=60_000)
        # FindCoordinator first, as clients do (it creates the transaction state topic)
        assert rk.call_api(bob, FindCoordinatorRequest(key=txn, key_type=1), 1).error_code == 0
        assert wait_until(lambda: rk.call_api(bob, allowed, 1).error_code == 0, "InitProducerId", timeout=30)


def test_acl_admin_needs_alter_on_the_cluster(acl_broker: AclBroker) -> None:
    from kafka.protocol.admin.acl import CreateAclsRequest

    creation = CreateAclsRequest.AclCreation(resource_type=2, resource_name="x", resource_pattern_type=3,
                                             principal="User:alice", host="*", operation=3, permission_type=3)
    with acl_broker.login(ALICE) as alice:
        answer = rk.call_api(alice, CreateAclsRequest(creations=[creation]), 1)
        assert [r.error_code for r in answer.results] == [31]
    with acl_broker.login(ADMIN) as admin:
        bad = CreateAclsRequest.AclCreation(resource_type=4, resource_name="not-the-cluster", resource_pattern_type=3,
                                            principal="User:alice", host="*", operation=8, permission_type=3)
        answer = rk.call_api(admin, CreateAclsRequest(creations=[bad]), 1)
        assert [r.error_code for r in answer.results] == [42]  # INVALID_REQUEST


def test_a_real_client_is_told_it_may_not_write(acl_broker: AclBroker) -> None:
    from confluent_kafka import KafkaException

    topic = acl_broker.create_topic("acl-client")
    security = Security("SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", username=BOB[0], password=BOB[1])
    with pytest.raises((AssertionError, KafkaException), match="(?i)authoriz"):
        roundtrip("confluent-kafka", acl_broker.bootstrap, topic, security, [b"x"])
    acl_broker.strata("acls", "--add", "--allow-principal", "User:bob", "--producer", "--consumer",
                      "--topic", topic, "--group", f"{topic}-reader")
    assert roundtrip("confluent-kafka", acl_broker.bootstrap, topic, security, [b"x"]) == [b"x"]


# --------------------------------------------------------------------------- the HTTP listener


def _http(broker: AclBroker, pki: Pki, path: str, *, user: tuple[str, str] | None = None,
          cert: tuple[Any, Any] | None = None, method: str = "GET") -> tuple[int, Any]:
    import base64
    import json
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(user).encode()).decode()
    request = urllib.request.Request(f"https://127.0.0.1:{broker.process.http_port}{path}", method=method,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=15) as answer:
            return answer.status, json.loads(answer.read() or b"null") if "json" in answer.headers.get(
                "Content-Type", "") else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_the_admin_api_refuses_unauthenticated_and_unauthorized_requests(acl_broker: AclBroker, pki: Pki) -> None:
    topic = acl_broker.create_topic("http-acl")
    assert _http(acl_broker, pki, "/v1/health")[0] == 200  # open by http.authentication.open.paths
    assert _http(acl_broker, pki, "/v1/topics")[0] == 401
    assert _http(acl_broker, pki, "/v1/topics", user=("alice", "wrong"))[0] == 401
    assert _http(acl_broker, pki, "/metrics", user=ALICE)[0] == 403  # DESCRIBE on the cluster
    status, body = _http(acl_broker, pki, f"/v1/topics/{topic}", user=ALICE)
    assert (status, body["error_code"]) == (403, "TOPIC_AUTHORIZATION_FAILED")
    assert _http(acl_broker, pki, "/v1/cluster", user=ADMIN)[0] == 200  # a super user
    # the topic list, as Kafka's Metadata: what alice may describe (nothing yet); all for admin
    status, listed = _http(acl_broker, pki, "/v1/topics?limit=1000", user=ALICE)
    before = [t["name"] for t in listed["topics"]]  # those other tests of the module gave her
    assert status == 200 and topic not in before, listed
    everything = [t["name"] for t in _http(acl_broker, pki, "/v1/topics?limit=1000", user=ADMIN)[1]["topics"]]
    assert topic in everything and len(everything) > len(before)
    acl_broker.strata("acls", "--add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", topic)
    assert _http(acl_broker, pki, f"/v1/topics/{topic}", user=ALICE)[0] == 200
    status, listed = _http(acl_broker, pki, "/v1/topics?limit=1000", user=ALICE)
    assert sorted(t["name"] for t in listed["topics"]) == sorted([*before, topic]), listed
    assert listed["total"] == len(before) + 1
    # the group list, as Kafka's ListGroups: only groups she may describe (the one she was
    # given Read on in test_group_acls_gate_the_group_apis, not bob's consumer group)
    status, groups = _http(acl_broker, pki, "/v1/groups", user=ALICE)
    every_group = {g["group_id"] for g in _http(acl_broker, pki, "/v1/groups", user=ADMIN)[1]["groups"]}
    assert status == 200
    assert {g["group_id"] for g in groups["groups"]} == {g for g in every_group if g.startswith("acl-group")}
    assert _http(acl_broker, pki, f"/v1/topics/{topic}", user=ALICE, method="DELETE")[0] == 403
    alice_cert = pki.client("alice")  # the same principal by its certificate (the mapping rule)
    assert _http(acl_broker, pki, f"/v1/topics/{topic}", cert=alice_cert)[0] == 200
    assert _http(acl_broker, pki, "/v1/cluster", cert=alice_cert)[0] == 403
    with pytest.raises(OSError):  # plain HTTP is not served on a TLS listener
        import urllib.request

        urllib.request.urlopen(acl_broker.process.admin_url + "/v1/health", timeout=5).read()


def test_created_topics_configs_need_describe_configs(acl_broker: AclBroker) -> None:
    """Kafka's CreateTopics answers a topic's configs only to a principal that may
    DESCRIBE_CONFIGS it: without, the topic is created and its configs withheld
    (``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED)."""
    prefix = topic_name("acl-create")
    acl_broker.strata("acls", "--add", "--allow-principal", "User:bob", "--allow-principal", "User:alice",
                      "--operation", "Create", "--topic", prefix, "--resource-pattern-type", "prefixed")
    acl_broker.strata("acls", "--add", "--allow-principal", "User:alice", "--operation", "DescribeConfigs",
                      "--topic", prefix, "--resource-pattern-type", "prefixed")

    def create(who: tuple[str, str], name: str) -> Any:
        request = CreateTopicsRequest(timeout_ms=30_000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=1,
                                               assignments=[], configs=[])])
        with acl_broker.login(who) as conn:
            return rk.call_api(conn, request, 7).topics[0]

    withheld = create(BOB, f"{prefix}-bob")
    assert withheld.error_code == 0  # created
    assert withheld.topic_config_error_code == 29  # TOPIC_AUTHORIZATION_FAILED
    assert not withheld.configs and withheld.num_partitions == -1
    shown = create(ALICE, f"{prefix}-alice")
    assert shown.error_code == 0 and shown.topic_config_error_code == 0
    assert shown.num_partitions == 1
    assert any(c.name == "retention.ms" for c in shown.configs)
    listed = acl_broker.strata("topics", "list")
    assert f"{prefix}-bob" in listed and f"{prefix}-alice" in listed
