"""The W3C trace context a job carries (docs/observability.md), as plain text.

A job keeps the ``traceparent`` of the span that accepted it (or of its submitter, when tracing
is off) in ``jobs.traceparent``, and its messages carry it in a header of the same name
(``core/message.py``). Here it is only checked and written back: ``jobrelay/telemetry.py`` turns
it into OpenTelemetry spans. Pure: no I/O library, no OpenTelemetry.

The rules are those of https://www.w3.org/TR/trace-context/#traceparent-header: lowercase hex
fields, a trace id and a parent id that are not all zeros, version ``ff`` invalid, version
``00`` exactly 55 characters, a later version at least that long (its first four fields are
read, and written back as version ``00``).
"""

from __future__ import annotations

from dataclasses import dataclass

TRACEPARENT_LENGTH = 55
# Longer than any traceparent a tracer sends: a bigger value is refused before it is scanned.
MAX_TRACEPARENT_CHARS = 512
_HEX = frozenset("0123456789abcdef")
_ZERO_TRACE_ID = "0" * 32
_ZERO_SPAN_ID = "0" * 16


@dataclass(frozen=True)
class TraceParent:
    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits: the parent span of whatever continues it
    flags: int  # bit 0: sampled

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def header(self) -> str:
        """The ``traceparent`` header value (version 00)."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"


def parse_traceparent(value: str | bytes | None) -> TraceParent | None:
    """The trace context in a ``traceparent`` value; None when it is missing or not valid (a
    malformed one is ignored, never an error: the job simply starts a trace of its own)."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str) or len(value) > MAX_TRACEPARENT_CHARS:
        return None
    value = value.strip(" \t")  # optional whitespace around a header value
    if len(value) < TRACEPARENT_LENGTH:
        return None
    version, trace_id, span_id, flags = (
        value[0:2],
        value[3:35],
        value[36:52],
        value[53:55],
    )
    if value[2] != "-" or value[35] != "-" or value[52] != "-":
        return None
    if not _is_hex(version) or version == "ff":
        return None
    if version == "00" and len(value) != TRACEPARENT_LENGTH:
        return None
    if len(value) > TRACEPARENT_LENGTH and value[TRACEPARENT_LENGTH] != "-":
        return None
    if not (_is_hex(trace_id) and _is_hex(span_id) and _is_hex(flags)):
        return None
    if trace_id == _ZERO_TRACE_ID or span_id == _ZERO_SPAN_ID:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def valid_traceparent(value: str | bytes | None) -> str | None:
    """``value`` as a version-00 ``traceparent`` when it is a valid one, else None."""
    parsed = parse_traceparent(value)
    return None if parsed is None else parsed.header()


def trace_id_of(traceparent: str) -> str:
    """The trace id of a ``traceparent`` this module wrote (``valid_traceparent``)."""
    return traceparent[3:35]


def _is_hex(text: str) -> bool:
    return _HEX.issuperset(text)  # one pass in C: the dispatcher checks one per message
