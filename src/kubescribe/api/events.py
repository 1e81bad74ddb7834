"""Reasons of the Kubernetes Events the operator records on its objects beyond Ready changes
(those carry the Ready condition's reason). One line each, defined here only; the README's
"Events" table explains them (tests/unit/test_events.py checks it)."""

from __future__ import annotations

from typing import Final

# On a GitTarget, from its branch writer.
PUSH_RECOVERED: Final = "PushRecovered"  # a write succeeded after failed ones (an outage ended)
REBUILT: Final = "RebuiltOnForeignCommit"  # a push lost the race; rebuilt on the remote's tip
DOCUMENT_REFUSED: Final = "DocumentRefused"  # documents newly not written (reason in message)
# On a GitTarget, from the replica that takes or gives its branch (several replicas).
WRITER_ACQUIRED: Final = "WriterAcquired"
WRITER_HANDED_OVER: Final = "WriterHandedOver"
WRITER_LOST: Final = "WriterLost"

EVENT_REASONS: Final = frozenset(
    {
        PUSH_RECOVERED,
        REBUILT,
        DOCUMENT_REFUSED,
        WRITER_ACQUIRED,
        WRITER_HANDED_OVER,
        WRITER_LOST,
    }
)
