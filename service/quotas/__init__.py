"""Quotas: client quotas by Kafka's entities (user, client id; produce and fetch byte
rates, request time) with KIP-219 throttling, and the broker's byte rate of remote
(tiered) reads (KIP-956). :mod:`~service.quotas.entities` is the stored form and
Describe/AlterClientQuotas; :mod:`~service.quotas.manager` measures and throttles."""
