"""The Kafka listener's connections (Kafka's ``kafka.network``): ``server`` (accept, read
frames, dispatch, write responses in order), ``transport`` (the bytes-to-socket seam,
plain or TLS), ``request_memory`` (``queued.max.request.bytes``), ``eager`` (a handler's
first step run without a task)."""
