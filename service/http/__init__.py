"""The broker's HTTP listener: status page, Prometheus metrics, admin REST API and its OpenAPI document."""
