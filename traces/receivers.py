"""Request plumbing shared by the ingestion endpoints: size caps, decompression, overload, auth."""

import threading
import zlib

from django.conf import settings
from django.http import HttpRequest

from clear.errors import ClearError
from clear.projects.authentication import project_key_authenticate
from clear.projects.client_address import client_address_get
from clear.projects.models import Project


class IngestError(ClearError):
    pass


class PayloadTooLarge(IngestError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaType(IngestError):
    status_code = 415
    code = "unsupported_media_type"


class Overloaded(IngestError):
    status_code = 503
    code = "overloaded"


_in_flight = 0
_in_flight_lock = threading.Lock()


class InFlightLimit:
    """Refuse work beyond CLEAR_INGEST_MAX_IN_FLIGHT concurrent requests in this process: a fast 503 with
    Retry-After lets OTel exporters back off instead of piling up on a saturated database."""

    def __enter__(self) -> "InFlightLimit":
        global _in_flight
        with _in_flight_lock:
            if _in_flight >= settings.CLEAR_INGEST_MAX_IN_FLIGHT:
                raise Overloaded(
                    f"Clear is handling {_in_flight} ingestion requests already; retry after the Retry-After delay."
                )
            _in_flight += 1
        return self

    def __exit__(self, *exc_info) -> None:
        global _in_flight
        with _in_flight_lock:
            _in_flight -= 1


def authenticate(request: HttpRequest) -> Project:
    return project_key_authenticate(authorization=request.META.get("HTTP_AUTHORIZATION"),
                                    address=client_address_get(meta=request.META)).project


def _cap_message(cap: int) -> str:
    return (f"The request body is larger than {cap} bytes (CLEAR_INGEST_MAX_BODY_BYTES, after decompression); "
            "send smaller batches (e.g. a lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE).")


def _read_unsized(request: HttpRequest, limit: int) -> bytes:
    """Up to `limit` bytes of a body sent without Content-Length (Transfer-Encoding: chunked). Django reads only
    CONTENT_LENGTH bytes, so such a body looked empty; a server that sets wsgi.input_terminated (gunicorn) has
    decoded the chunks and ends wsgi.input at the body's end, so reading it to the end is safe. Elsewhere an
    unsized body is not read: reading past the request would wait for the client forever."""
    if not request.META.get("wsgi.input_terminated"):
        return request.read(limit)
    stream, parts, size = request.META["wsgi.input"], [], 0
    while size < limit:
        part = stream.read(min(limit - size, 1 << 16))
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def read_body(request: HttpRequest) -> bytes:
    """The decompressed body, never holding more than the cap in memory (a gzip bomb stops at the cap)."""
    cap = settings.CLEAR_INGEST_MAX_BODY_BYTES
    length = request.META.get("CONTENT_LENGTH")
    try:
        declared = int(length or 0)
    except ValueError:
        declared = 0
    if declared > cap:
        raise PayloadTooLarge(_cap_message(cap))
    raw = request.read(cap + 1) if length else _read_unsized(request, cap + 1)
    if len(raw) > cap:
        raise PayloadTooLarge(_cap_message(cap))
    encoding = (request.META.get("HTTP_CONTENT_ENCODING") or "identity").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "deflate", "x-gzip"):
        raise UnsupportedMediaType(f"Unsupported Content-Encoding {encoding!r}: send gzip, deflate or none.")
    # wbits 47 = auto-detect gzip or zlib headers.
    inflater = zlib.decompressobj(47)
    try:
        body = inflater.decompress(raw, cap + 1)
    except zlib.error as exc:
        raise IngestError(f"The body is not valid {encoding} data ({exc}); compress it again or drop "
                          "Content-Encoding.", code="bad_compression") from None
    if len(body) > cap or inflater.unconsumed_tail:
        raise PayloadTooLarge(_cap_message(cap))
    return body
