"""The broker's HTTP listener: the console, Prometheus metrics, the admin REST API and its OpenAPI document."""
