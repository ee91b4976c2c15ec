"""What the model-mode benchmark's child records while it runs (benchmarks/model_mode/run.py): every model request and
JSON conversation (Recorder), "database is locked" in the logs (LockLog), and the ingestion probe (Probe)."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

LOCKED = "database is locked"


class Recorder:
    """Every model request (litellm.completion) and every JSON conversation (llm_json_complete) of this process."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.conversations: list[dict] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    def install(self) -> None:
        import clear.llm as clear_llm
        import diagnosis.insights.naming as naming
        import diagnosis.judges.llm.client as client

        litellm = clear_llm.litellm_load()
        original_completion = litellm.completion
        recorder = self

        def completion(*a, **kw):
            entry = {"kind": getattr(recorder.local, "kind", "") or "", "max_tokens": kw.get("max_tokens"),
                     "response_format": (kw.get("response_format") or {}).get("type"), "finish_reason": "",
                     "input_tokens": 0, "output_tokens": 0, "error": ""}
            started = time.perf_counter()
            try:
                response = original_completion(*a, **kw)
            except Exception as error:
                entry["error"] = f"{type(error).__name__}: {str(error)[:300]}"
                raise
            finally:
                entry["seconds"] = round(time.perf_counter() - started, 2)
                with recorder.lock:
                    recorder.requests.append(entry)
                conversation = getattr(recorder.local, "conversation", None)
                if conversation is not None:
                    conversation["requests"].append(entry)
            entry["finish_reason"] = getattr(response.choices[0], "finish_reason", "") or ""
            usage = getattr(response, "usage", None)
            entry["input_tokens"] = int(getattr(usage, "prompt_tokens", 0) or 0)
            entry["output_tokens"] = int(getattr(usage, "completion_tokens", 0) or 0)
            return response

        litellm.completion = completion

        def wrap_complete(original):
            def llm_complete(**kw):
                recorder.local.kind = kw.get("schema_name") or ""
                conversation = getattr(recorder.local, "conversation", None)
                if conversation is not None and not conversation["kind"]:
                    conversation["kind"] = recorder.local.kind
                return original(**kw)
            return llm_complete

        def wrap_json(original):
            def llm_json_complete(**kw):
                conversation = {"kind": "", "rounds": [], "requests": [], "outcome": "", "cause": "", "error": ""}
                recorder.local.conversation = conversation
                inner = kw.get("on_reply")

                def on_reply(round_no, content, problems):
                    conversation["rounds"].append({"round": round_no, "ok": not problems,
                                                   "problems": "; ".join(problems)[:300], "chars": len(content)})
                    if inner is not None:
                        inner(round_no, content, problems)

                kw["on_reply"] = on_reply
                started = time.perf_counter()
                try:
                    reply = original(**kw)
                    conversation["outcome"] = "accepted" if not reply.problems else "invalid_output"
                    return reply
                except Exception as error:
                    from clear.llm_errors import llm_error_cause

                    conversation["outcome"] = "error"
                    conversation["cause"] = llm_error_cause(error=error)
                    conversation["error"] = f"{type(error).__name__}: {str(error)[:300]}"
                    raise
                finally:
                    conversation["seconds"] = round(time.perf_counter() - started, 2)
                    recorder.local.conversation = None
                    with recorder.lock:
                        recorder.conversations.append(conversation)
            return llm_json_complete

        client.llm_complete = wrap_complete(client.llm_complete)
        client.llm_json_complete = wrap_json(client.llm_json_complete)
        naming.llm_complete = wrap_complete(naming.llm_complete)
        naming.llm_json_complete = wrap_json(naming.llm_json_complete)


class LockLog:
    """Counts log records and exception texts that say 'database is locked'."""

    def __init__(self) -> None:
        import logging

        self.count = 0
        self.examples: list[str] = []
        outer = self

        class Handler(logging.Handler):
            def emit(self, record):
                text = record.getMessage() + (self.format(record) if record.exc_info else "")
                if LOCKED in text:
                    outer.count += 1
                    if len(outer.examples) < 5:
                        outer.examples.append(f"{record.name}: {record.getMessage()[:200]}")

        handler = Handler(level=logging.DEBUG)
        handler.setFormatter(logging.Formatter())
        logging.getLogger().addHandler(handler)


class Probe(threading.Thread):
    """Posts one OTLP/JSON trace every `interval` seconds to the ingestion endpoint, records status and seconds."""

    def __init__(self, *, url: str, key: str, bodies: list[bytes], interval: float) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.bodies, self.interval = url, key, bodies, interval
        self.stopped = threading.Event()
        self.posts: list[dict] = []

    def run(self) -> None:
        i = 0
        while not self.stopped.wait(self.interval):
            body = self.bodies[i % len(self.bodies)]
            i += 1
            request = urllib.request.Request(self.url, data=body, method="POST", headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {self.key}"})
            started = time.perf_counter()
            status, text = 0, ""
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status = response.status
            except urllib.error.HTTPError as error:
                status, text = error.code, error.read()[:300].decode(errors="replace")
            except Exception as error:  # noqa: BLE001
                text = f"{type(error).__name__}: {error}"
            self.posts.append({"status": status, "seconds": round(time.perf_counter() - started, 2), "error": text})
