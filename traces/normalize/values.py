"""Small value helpers shared by the OTLP and Langfuse decoders (ids, integers, times, JSON-in-strings)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import sys
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_NONFINITE = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}


def _parse_constant(name: str) -> str:
    # json.loads accepts the non-standard literals NaN / Infinity / -Infinity; keep them JSON-able as strings.
    return _NONFINITE.get(name, name)


_loads = json.JSONDecoder(parse_constant=_parse_constant).decode


def loads(text: str | bytes) -> Any:
    """json.loads that maps NaN / Infinity literals to strings (Postgres JSONB rejects them)."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8-sig")  # tolerate a BOM
    try:
        return _loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        # json's int() refuses a number past sys.get_int_max_str_digits(): the client's mistake like any bad JSON.
        raise json.JSONDecodeError(f"a number has more than {sys.get_int_max_str_digits()} digits", text, 0) from None


def clean_float(x: float) -> float | str:
    """A float as a JSON-able value: NaN / ±inf become strings."""
    if x != x:
        return "NaN"
    if x == math.inf:
        return "Infinity"
    if x == -math.inf:
        return "-Infinity"
    return x


def decode_jsonish(value: Any, *, depth: int = 3) -> Any:
    """Decode JSON that arrived inside a string (sometimes twice). Plain text stays text.

    Only strings that look like a JSON object, array or string literal are decoded, so `"174"` or `"hello"` stay
    strings; `'"value1"'` becomes `value1`, `'"[{\\"a\\": 1}]"'` becomes `[{"a": 1}]`.
    """
    while depth > 0 and isinstance(value, str):
        # The usual case starts with its bracket: parse it as it is (json skips surrounding whitespace itself)
        # instead of copying a long string through strip() first.
        s = value if value[:1] in ("{", "[", '"') else value.strip()
        if not s or s[0] not in '{["':
            return value
        try:
            decoded = _loads(s)
        except (ValueError, RecursionError):  # too deep to parse: the text is kept as it came
            return value
        value = decoded
        depth -= 1
    return value


def text_value(value: Any) -> str | None:
    """A non-blank string attribute (stripped), or a number as text; None for anything else (bools included)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.strip()
        return value or None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return str(value)
    return None


def first_text(a: dict, keys: tuple[str, ...]) -> str | None:
    """The first of `keys` whose value is a `text_value`."""
    for key in keys:
        value = a.get(key)
        if value is not None:
            s = text_value(value)
            if s:
                return s
    return None


def to_int(value: Any) -> int | None:
    """Coerce a count or 64-bit number: int, float, numeric string, or protobufjs Long `{low, high, unsigned}`."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or value in (math.inf, -math.inf):
            return None
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return None
        try:
            return int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                return None
            if f != f or f in (math.inf, -math.inf):
                return None
            return int(f)
    if isinstance(value, dict) and "low" in value and "high" in value:
        try:
            low = int(value["low"]) & 0xFFFFFFFF
            high = int(value["high"]) & 0xFFFFFFFF
        except (TypeError, ValueError):
            return None
        n = (high << 32) | low
        if not value.get("unsigned") and n >= 1 << 63:
            n -= 1 << 64
        return n
    return None


def to_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            f = float(value)
        except OverflowError:  # an int past the float range is no finite number either
            return None
    elif isinstance(value, str):
        try:
            f = float(value.strip())
        except ValueError:
            return None
    elif isinstance(value, dict):
        n = to_int(value)
        return None if n is None else float(n)
    else:
        return None
    if f != f or f in (math.inf, -math.inf):
        return None
    return f


_MAX_NS = (datetime(9999, 12, 31, tzinfo=UTC) - EPOCH) // timedelta(microseconds=1) * 1000


def ns_to_datetime(ns: int) -> datetime | None:
    """Unix nanoseconds -> aware UTC datetime (microsecond precision); None when outside datetime's range."""
    if ns < 0 or ns > _MAX_NS:
        return None
    return EPOCH + timedelta(microseconds=ns // 1000)


def ns_to_iso(ns: int) -> str | None:
    dt = ns_to_datetime(ns) if ns else None
    return datetime_to_iso(dt) if dt is not None else None


def datetime_to_iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


def parse_iso_datetime(value: Any) -> datetime | None:
    """Parse an ISO-8601 timestamp (with `Z` or offset; naive means UTC). Returns None when unparseable."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        s = value.strip()
        if len(s) >= 2 and s[0] == '"' and s[-1] == '"':  # JSON-encoded string literal
            s = s[1:-1]
        if not s:
            return None
        if s[-1] in "zZ":
            s = s[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            return None
    else:
        return None
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


# ---------------------------------------------------------------------------------------------------------------
# ids

_HEX_LEN = {16: 32, 8: 16}


def id_from_json(value: Any, nbytes: int) -> tuple[str | None, str | None]:
    """Decode an OTLP/JSON id into lower-case hex. Returns (hex, None) or (None, reason); (None, None) if absent.

    Accepts hex in any case (the spec), base64 / base64url (protobuf-JSON style), integer arrays and Node
    `{"type": "Buffer", "data": [...]}` objects (old Langfuse SDKs) and `{"0": .., "1": ..}` (a serialised
    Uint8Array).
    """
    if value is None:
        return None, None
    if isinstance(value, str):
        if not value:
            return None, None
        n = len(value)
        if n == _HEX_LEN[nbytes]:
            try:
                if len(bytes.fromhex(value)) == nbytes:
                    return value.lower(), None
            except ValueError:
                pass
        raw = _b64(value)
        if raw is None:
            return None, f"{value!r} is neither {2 * nbytes} hex digits nor base64 of {nbytes} bytes"
    elif isinstance(value, list):
        try:
            raw = bytes(value)
        except (TypeError, ValueError):
            return None, "id array must hold integers 0..255"
    elif isinstance(value, dict):
        data = value.get("data")
        if isinstance(data, list):
            try:
                raw = bytes(data)
            except (TypeError, ValueError):
                return None, "id Buffer data must hold integers 0..255"
        elif value and all(k.isdigit() for k in value):
            try:
                raw = bytes(value[k] for k in sorted(value, key=int))
            except (TypeError, ValueError):
                return None, "id object must map indexes to integers 0..255"
        else:
            return None, "id must be a hex string, base64 string or byte array"
    else:
        return None, f"id must be a hex string, not {type(value).__name__}"
    if not raw:
        return None, None
    if len(raw) != nbytes:
        return None, f"id has {len(raw)} bytes, expected {nbytes}"
    return raw.hex(), None


def _b64(value: str) -> bytes | None:
    s = value.strip()
    pad = (-len(s)) % 4
    if pad == 3:
        return None
    s += "=" * pad
    try:
        if "-" in s or "_" in s:
            return base64.urlsafe_b64decode(s)
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return None


def stable_hex(text: str, nchars: int, *, salt: str = "") -> str:
    return hashlib.sha256((salt + text).encode("utf-8")).hexdigest()[:nchars]


def langfuse_trace_id(value: str) -> str:
    """Map an arbitrary Langfuse trace id to 32 hex: a uuid (with or without dashes) or 32-hex id keeps its
    digits; anything else is hashed (sha256, first 32 hex digits)."""
    s = value.strip()
    if len(s) == 32:
        try:
            if len(bytes.fromhex(s)) == 16:
                return s.lower()
        except ValueError:
            pass
    if len(s) == 36:
        try:
            return uuid.UUID(s).hex
        except ValueError:
            pass
    return stable_hex(s, 32, salt="langfuse-trace:")


def langfuse_observation_id(value: str) -> str:
    """Map an arbitrary Langfuse observation id to 16 hex: a 16-hex id (OTel-based SDKs) is kept, anything else
    (uuids included) is hashed (sha256, first 16 hex digits)."""
    s = value.strip()
    if len(s) == 16:
        try:
            if len(bytes.fromhex(s)) == 8:
                return s.lower()
        except ValueError:
            pass
    return stable_hex(s, 16, salt="langfuse-observation:")


def langfuse_root_span_id(trace_id_original: str) -> str:
    """Deterministic span id of the synthetic root span that stands for a Langfuse trace."""
    return stable_hex(trace_id_original.strip(), 16, salt="langfuse-trace-root:")
