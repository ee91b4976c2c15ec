"""An OpenAI-compatible chat-completions server on 127.0.0.1 that answers from a script.

A script item is a string (the assistant's content), a dict with `content`/`usage`/`status`/`headers`/`body`, or a
callable taking the request JSON and returning one of those. Every request is recorded. A dict with `hold` (a
threading.Event) keeps its request open until the test sets the event, as a slow model would; `held` counts the
requests being held right now. A dict with `drop: True` closes the connection without answering, as a server
that restarts mid-request does.
"""

import itertools
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ScriptItem = str | dict | Callable[[dict], "str | dict"]
HOLD_LIMIT_S = 120.0


class FakeLLMServer:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self._script: list[ScriptItem] = []
        self._default: ScriptItem | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._held = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def call_count(self) -> int:
        return len(self.requests)

    @property
    def held(self) -> int:
        with self._lock:
            return self._held

    def start(self) -> "FakeLLMServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def script(self, *items: ScriptItem, default: ScriptItem | None = None) -> None:
        """Answer the next requests with these items in order, then with `default` (or fail with 500)."""
        with self._lock:
            self._script = list(items)
            self._default = default
            self.requests.clear()

    def _next(self, request: dict) -> dict:
        with self._lock:
            self.requests.append(request)
            item = self._script.pop(0) if self._script else self._default
        if item is None:
            return {"status": 500, "body": {"error": {"message": "fake LLM script exhausted", "type": "server_error"}}}
        if callable(item):
            item = item(request)
        if isinstance(item, str):
            item = {"content": item}
        if item.get("hold") is not None:
            self._hold(item["hold"])
        return item

    def _hold(self, release: threading.Event) -> None:
        with self._lock:
            self._held += 1
        try:
            # Bounded: a test that fails before releasing must not leave a handler thread behind for ever.
            release.wait(timeout=HOLD_LIMIT_S)
        finally:
            with self._lock:
                self._held -= 1

    def _completion(self, request: dict, item: dict) -> dict:
        content = item.get("content", "")
        if not isinstance(content, str):
            content = json.dumps(content)
        prompt_chars = sum(len(str(m.get("content", ""))) for m in request.get("messages", []))
        usage = item.get("usage") or {
            "prompt_tokens": max(1, prompt_chars // 4),
            "completion_tokens": max(1, len(content) // 4),
        }
        usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": request.get("model", "fake-model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": item.get("finish_reason", "stop")}],
            "usage": usage,
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    request = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    request = {"_raw": raw.decode(errors="replace")}
                request["_path"] = self.path
                request["_headers"] = {key.lower(): value for key, value in self.headers.items()}
                if not self.path.rstrip("/").endswith("chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                item = server._next(request)
                if item.get("drop"):
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                status = item.get("status", 200)
                body = item.get("body") if "body" in item else (
                    server._completion(request, item) if status == 200 else {"error": {"message": "scripted error"}}
                )
                self._send(status, body, item.get("headers", {}))

            def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in (headers or {}).items():
                    self.send_header(key, str(value))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
