"""Kafka's broker configs of listeners, TLS, SASL, authorization and quotas.

Part of :data:`common.config.keys.BROKER_CONFIGS` (kept apart so that module
stays readable). Names, meanings and defaults are Kafka's, with these documented
deviations: ``ssl.keystore.type`` and ``ssl.truststore.type`` default to (and
accept only) ``PEM``; ``sasl.enabled.mechanisms`` defaults to the mechanisms
Strata implements (``PLAIN,SCRAM-SHA-256,SCRAM-SHA-512``; Kafka's default is
GSSAPI, which Strata does not implement) and ``sasl.mechanism.inter.broker.protocol``
to ``SCRAM-SHA-512``. Keys marked "(Strata)" are Strata's own. Secrets are
``password`` configs: never shown by DescribeConfigs, in errors or in ``repr``.

Immutable; thread-safe.
"""

from __future__ import annotations

from common.config.configdef import ConfigDef, Validator, at_least

__all__ = ["SASL_MECHANISMS", "SECURITY_CONFIGS"]

_LONG_MAX = str(2**63 - 1)
_INT_MAX = str(2**31 - 1)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_CLIENT_AUTH = ("none", "requested", "required")
_TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
_HTTP_AUTH = ("basic", "mtls")


def _not_empty(value: object) -> str | None:
    return "at least one value is needed" if isinstance(value, list) and not value else None


def _all(*checks: Validator) -> Validator:
    def check(value: object) -> str | None:
        return next((r for c in checks if (r := c(value)) is not None), None)  # type: ignore[arg-type]

    return check


# fmt: off
SECURITY_CONFIGS: tuple[ConfigDef, ...] = (
    # -- listeners ------------------------------------------------------------------------
    ConfigDef("listener.security.protocol.map", "string",
              "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
              "Security protocol of each listener name (NAME:PROTOCOL,...)."),
    ConfigDef("inter.broker.listener.name", "string", None,
              "The listener brokers connect to each other on (exclusive with "
              "security.inter.broker.protocol)."),
    ConfigDef("security.inter.broker.protocol", "string", "PLAINTEXT",
              "Security protocol between brokers: the listener of that name.", valid_values=_PROTOCOLS),
    # -- TLS ------------------------------------------------------------------------------
    ConfigDef("ssl.keystore.type", "string", "PEM",
              "Format of the key store; Strata reads PEM (Kafka's default is JKS).", valid_values=("PEM",)),
    ConfigDef("ssl.keystore.location", "string", None,
              "PEM file holding the private key and the certificate chain."),
    ConfigDef("ssl.keystore.password", "password", None, "Not used with PEM (ssl.key.password is)."),
    ConfigDef("ssl.keystore.certificate.chain", "password", None,
              "The certificate chain in PEM (instead of ssl.keystore.location)."),
    ConfigDef("ssl.keystore.key", "password", None,
              "The private key in PEM, PKCS#8 (instead of ssl.keystore.location)."),
    ConfigDef("ssl.certificate.location", "string", None,
              "PEM file of the certificate chain, with ssl.key.location (instead of "
              "ssl.keystore.location; the layout of a Kubernetes TLS secret; Strata)."),
    ConfigDef("ssl.key.location", "string", None,
              "PEM file of the private key of ssl.certificate.location (Strata)."),
    ConfigDef("ssl.key.password", "password", None, "Password of an encrypted private key."),
    ConfigDef("ssl.truststore.type", "string", "PEM",
              "Format of the trust store; Strata reads PEM (Kafka's default is JKS).", valid_values=("PEM",)),
    ConfigDef("ssl.truststore.location", "string", None,
              "PEM file of the CA certificates client certificates (and peers) are verified with."),
    ConfigDef("ssl.truststore.password", "password", None, "Not used with PEM."),
    ConfigDef("ssl.truststore.certificates", "password", None,
              "The trusted CA certificates in PEM (instead of ssl.truststore.location)."),
    ConfigDef("ssl.client.auth", "string", "none",
              "Client certificates: none, requested (verified when sent) or required.",
              valid_values=_CLIENT_AUTH),
    ConfigDef("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS versions accepted.",
              validator=_not_empty, valid_values=_TLS_VERSIONS),
    ConfigDef("ssl.protocol", "string", "TLSv1.3",
              "TLS version a broker asks for when it connects to another.", valid_values=_TLS_VERSIONS),
    ConfigDef("ssl.cipher.suites", "list", "",
              "Cipher suites of every enabled TLS version (OpenSSL or IANA names), most preferred "
              "first; a version none of whose suites is listed is off; empty: OpenSSL's defaults."),
    ConfigDef("ssl.principal.mapping.rules", "string", "DEFAULT",
              "Rules mapping a client certificate's subject to a principal name "
              "(RULE:pattern/replacement/[LU], ..., DEFAULT)."),
    ConfigDef("ssl.endpoint.identification.algorithm", "string", "https",
              "Check the host name of a peer broker's certificate (https) or not (empty)."),
    ConfigDef("ssl.handshake.timeout.ms", "int", "10000",
              "A TLS handshake not done in this long closes the connection (Strata).",
              validator=at_least(1)),
    ConfigDef("ssl.reload.interval.ms", "int", "30000",
              "How often the keystore and truststore files are looked at; changed files are "
              "loaded for new connections, certificate rotation without a restart (0: never; Strata).",
              validator=at_least(0)),
    # -- SASL -----------------------------------------------------------------------------
    ConfigDef("sasl.enabled.mechanisms", "list", ",".join(SASL_MECHANISMS),
              "SASL mechanisms of the SASL listeners (Kafka's default is GSSAPI).",
              validator=_not_empty, valid_values=SASL_MECHANISMS),
    ConfigDef("sasl.mechanism.inter.broker.protocol", "string", "SCRAM-SHA-512",
              "SASL mechanism a broker authenticates to another with (Kafka's default is GSSAPI).",
              valid_values=SASL_MECHANISMS),
    ConfigDef("sasl.jaas.config", "password", None,
              "The credentials a broker authenticates to another with, as Kafka's JAAS line: "
              "org.apache.kafka.common.security.scram.ScramLoginModule required "
              'username="broker" password="...";'),
    ConfigDef("sasl.server.max.receive.size", "int", "524288",
              "Largest SASL token a client may send before it is authenticated.",
              validator=at_least(1)),
    ConfigDef("connection.failed.authentication.delay.ms", "int", "100",
              "Delay before the connection of a failed authentication is closed.",
              validator=at_least(0)),
    ConfigDef("connections.max.reauth.ms", "long", "0",
              "Longest session of a SASL authentication (KIP-368); 0: no limit.",
              validator=at_least(0)),
    # -- authorization --------------------------------------------------------------------
    ConfigDef("authorizer.class.name", "string", "",
              "The authorizer: empty for none, or org.apache.kafka.metadata.authorizer."
              "StandardAuthorizer (or strata) for ACLs."),
    ConfigDef("super.users", "string", None,
              "Principals allowed everything, separated by semicolons (User:admin;User:broker)."),
    ConfigDef("allow.everyone.if.no.acl.found", "boolean", "false",
              "Allow a resource that no ACL matches to everyone."),
    # -- quotas ---------------------------------------------------------------------------
    ConfigDef("quota.window.num", "int", "11", "Samples a client quota's rate is measured over.",
              validator=at_least(1)),
    ConfigDef("quota.window.size.seconds", "int", "1", "Length of one quota sample.",
              validator=at_least(1)),
    ConfigDef("remote.log.manager.fetch.max.bytes.per.second", "long", _LONG_MAX,
              "Bytes per second this broker reads from the remote tier for fetches (KIP-956).",
              validator=at_least(1)),
    ConfigDef("remote.log.manager.fetch.quota.window.num", "int", "11",
              "Samples the remote fetch rate is measured over.", validator=at_least(1)),
    ConfigDef("remote.log.manager.fetch.quota.window.size.seconds", "int", "1",
              "Length of one sample of the remote fetch rate.", validator=at_least(1)),
    # -- connections (Kafka's connection quotas; service/quotas/connections.py) ------------
    ConfigDef("max.connections", "int", _INT_MAX,
              "Connections the broker serves at once; beyond it listeners stop accepting until one "
              "closes (the inter-broker listener, with others beside it, is exempt from this "
              "broker-wide limit). Also per listener as listener.name.<listener>.max.connections.",
              validator=at_least(0)),
    ConfigDef("max.connections.per.ip", "int", _INT_MAX,
              "Connections one IP address may have; more are closed at once.", validator=at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", "string", "",
              "Per-address limits as HOST:COUNT,... (host names resolved when the value is applied), e.g. "
              "10.0.0.7:500,batch-host:50."),
    ConfigDef("max.connection.creation.rate", "int", _INT_MAX,
              "New connections per second the broker accepts (not the inter-broker listener's); "
              "over it, listeners wait before accepting. Also per listener as "
              "listener.name.<listener>.max.connection.creation.rate.", validator=at_least(0)),
    ConfigDef("connections.reserved.fds", "int", "-1",
              "Open files kept from client connections for segments, the bucket and brokers: a "
              "connection that would use one is closed and the listener pauses. -1: an eighth of "
              "the open-files limit, at least 64 (Strata).", validator=at_least(-1)),
    # -- the HTTP listener (Strata) -------------------------------------------------------
    ConfigDef("http.ssl.enable", "boolean", "false",
              "Serve the HTTP listener over TLS with the ssl.keystore.* of the Kafka listeners "
              "(Strata)."),
    ConfigDef("http.ssl.client.auth", "string", "none",
              "Client certificates on the HTTP listener: none, requested or required (Strata).",
              valid_values=_CLIENT_AUTH),
    ConfigDef("http.authentication.methods", "list", "",
              "How HTTP requests authenticate: basic (a SCRAM user's password, over TLS only), "
              "mtls (a client certificate); empty: no authentication (Strata).",
              valid_values=_HTTP_AUTH),
    ConfigDef("http.max.connections", "int", "256",
              "Connections the HTTP listener serves at once; more are closed at once (Strata).",
              validator=at_least(1)),
    ConfigDef("http.authentication.open.paths", "list", "/v1/health,/v1/ready",
              "Paths answered without authentication, e.g. add /metrics for a scraper (Strata)."),
)
# fmt: on
