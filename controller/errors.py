"""Controller errors that ``local_tier.errors`` does not (yet) define.

Both are ``KafkaError`` subclasses with their Kafka code, so request handlers
treat them like every other Kafka error::

    KafkaError (local_tier.errors)
    ├── NotControllerError           NOT_CONTROLLER (41, retriable)
    └── TopicDeletionDisabledError   TOPIC_DELETION_DISABLED (73)

Note: ``local_tier.errors.for_code`` does not know these two codes.
"""

from __future__ import annotations

from local_tier.errors import ErrorCode, KafkaError

__all__ = ["NotControllerError", "TopicDeletionDisabledError"]


class NotControllerError(KafkaError):
    """The controller could not commit a change (others kept changing the metadata
    first, or it lost the right to write); the client should retry."""

    code = ErrorCode.not_controller


class TopicDeletionDisabledError(KafkaError):
    """``delete.topic.enable`` is false on this broker."""

    code = ErrorCode.topic_deletion_disabled
