"""Security: listeners, TLS, SASL authentication and ACL authorization.

* :mod:`~service.security.listeners` — Kafka's ``listeners``/``advertised.listeners``
  and the inter-broker listener; :mod:`~service.security.setup` builds each
  listener's :class:`~service.security.session.ListenerSecurity` at start.
* :mod:`~service.security.session` — a connection's principal and authentication state.
* :mod:`~service.security.tls`, :mod:`~service.security.tls_transport`,
  :mod:`~service.security.principal_mapping` — TLS with PEM files, TLS under the
  connection loop, certificate subjects to principals.
* :mod:`~service.security.principal` — ``KafkaPrincipal``.

Nothing here imports the broker, the handlers or the server: they import this.
"""
