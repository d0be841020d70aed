"""A llama-server look-alike on 127.0.0.1 that misbehaves on purpose, for the app's limits.

It answers llama-server's endpoints (/health, /props, /v1/models, /tokenize, /completion as
server-sent events) well enough for the app to connect, then lies as ``mode`` says:
``ok`` (a short answer), ``forever`` (streams words and never stops), ``pings`` (sends only
keep-alive comments), ``cut`` (a few words, then the connection drops), ``not-object`` (a
stream line that is JSON but no object), ``wrong-stream`` (a stream line with wrong types),
``wrong-props`` (its /props fields have the wrong types). Tokens are one per word.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = {"<|im_start|>": 1, "<|im_end|>": 2, "<tool_call>": 3, "</tool_call>": 4}


@dataclass
class LyingServer:
    mode: str = "ok"
    port: int = 0
    completions: int = 0
    streamed: int = 0  # pieces sent by the last completion
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _tokens(text: str) -> list[int]:
    if text in SPECIAL:
        return [SPECIAL[text]]
    return [10 + i for i, _ in enumerate(text.split())] or [10]


def _handler(state: LyingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # a streamed body ends when the connection closes

        def log_message(self, *args: Any) -> None:
            pass

        def _json(self, data: Any) -> None:
            body = json.dumps(data).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json({"status": "ok"})
            elif self.path == "/props":
                props: dict[str, Any] = {
                    "model_path": "/models/liar.gguf",
                    "default_generation_settings": {"n_ctx": 32768},
                    "total_slots": 1,
                    "chat_template": CHATML,
                    "build_info": "liar",
                }
                if state.mode == "wrong-props":
                    props.update(
                        model_path=["not", "a", "path"],
                        default_generation_settings={"n_ctx": "plenty"},
                        total_slots={"n": 2},
                    )
                self._json(props)
            elif self.path == "/v1/models":
                self._json({"data": [{"id": "liar", "meta": {"n_vocab": 100}}]})
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/tokenize":
                self._json({"tokens": _tokens(str(body.get("content", "")))})
                return
            if self.path != "/completion":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            n_predict = int(body.get("n_predict", 0))
            with contextlib.suppress(OSError):
                if n_predict == 0:  # the app warming the prompt: nothing generated
                    self._event({"content": "", "stop": True, "stop_type": "limit", "tokens": []})
                    return
                state.completions += 1
                state.streamed = 0
                self._answer()

        def _event(self, data: Any) -> None:
            self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            self.wfile.flush()

        def _word(self, text: str) -> None:
            self._event({"content": text, "tokens": [42], "stop": False})
            state.streamed += 1

        def _answer(self) -> None:
            mode = state.mode
            if mode == "forever":
                while not state.stop.is_set():
                    self._word("more ")
                    time.sleep(0.002)
            elif mode == "pings":
                while not state.stop.wait(0.1):
                    self.wfile.write(b": ping\n\n")
                    self.wfile.flush()
            elif mode == "cut":
                for word in ("I ", "cannot ", "say ", "that"):  # no sentence end: held back
                    self._word(word)
                self.wfile.flush()
                self.connection.shutdown(2)
            elif mode == "not-object":
                self._word("Hello ")
                self.wfile.write(b"data: [1, 2, 3]\n\n")
            elif mode == "wrong-stream":
                self._event({"content": {"text": "Hello"}, "tokens": "many", "stop": False})
            else:
                self._word("Hello there.")
                self._event(
                    {
                        "content": "",
                        "stop": True,
                        "stop_type": "eos",
                        "tokens": [2],
                        "timings": {"prompt_n": 10, "cache_n": 0, "prompt_ms": 5.0},
                    }
                )

    return Handler


@contextmanager
def lying_server(mode: str = "ok") -> Iterator[LyingServer]:
    """Serve on a free port of 127.0.0.1 for the ``with`` block."""
    state = LyingServer(mode=mode)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="lying-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
