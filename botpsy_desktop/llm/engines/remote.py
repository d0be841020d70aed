"""A llama-server on another machine as the engine: the app renders, constrains and decides.

Only the rendered prompt travels. The app renders it with the model's own template (read from
the server's ``/props``) and the request's tools, keeps the tool-call grammar (sent as a lazy
grammar that the server applies from ``<tool_call>`` on, as the local engine does) and streams
the reply from llama-server's native ``/completion`` endpoint (server-sent events) with prompt
caching, one server slot per conversation. Tools, the gate, files and passwords stay here.

llama-server's HTTP API is small and has no maintained Python client that speaks its native
endpoint (grammar triggers, slots, timings); the requests are written here over httpx.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from botpsy_desktop import __version__
from botpsy_desktop.core.config import (
    EngineSettings,
    ModelSettings,
    engine_origin,
    normalize_engine_url,
    plain_http_problem,
)
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.backend import Message
from botpsy_desktop.llm.language.prompt import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, PromptRenderer
from botpsy_desktop.llm.request import Request, ShapedEngine, ToolCallGrammars
from botpsy_desktop.llm.types import Completion, GenerationStats, PromptProgress, TextPiece

CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
_TEXT_STOPS = ("<|im_end|>", "<|endoftext|>")
_BETWEEN_CALLS = r"[ \t\n]{0,4}"  # what the model writes between two calls (a newline)
_FINAL_FIELDS = [
    "content", "tokens", "id_slot", "stop", "tokens_predicted", "tokens_evaluated",
    "truncated", "stop_type", "stopping_word", "tokens_cached", "timings",
]  # fmt: skip
SSE_PING_S = 10  # the server says it is alive this often while it evaluates a long prompt
WAY_BACK = "`botpsy engine local` runs the model on this computer again."

log = logging.getLogger(__name__)


def origin_of(url: str) -> str:
    """scheme://host:port of an engine address (the keyring entry of its API key)."""
    return engine_origin(url)


def remote_tool_call_grammar(call_grammar: str) -> str:
    """The lazy grammar sent to llama-server, from the engine's grammar of one call's body.

    llama-server feeds a lazy grammar from its trigger on (the ``<tool_call>`` token included),
    so the root here is the whole block: one call, then more calls only (the local engine also
    lets nothing but another call follow a call), then the end of the turn.
    """
    body = re.sub(r"^root ::=", "tool-call-body ::=", call_grammar, count=1, flags=re.M)
    if body == call_grammar:
        raise ValueError("the tool-call grammar has no root rule")
    opener = json.dumps(TOOL_CALL_OPEN)
    root = f"root ::= {opener} tool-call-body ( {_BETWEEN_CALLS} {opener} tool-call-body )*"
    return f"{root}\n{body}"


@dataclass
class _Slot:
    """What this process last left in one server slot (text and tokens, for continuing)."""

    index: int
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    used: float = 0.0


@dataclass(frozen=True)
class ServerInfo:
    """What the engine said about itself when connecting."""

    url: str
    model: str
    n_ctx: int
    slots: int
    n_vocab: int | None
    template_source: str  # "model" or "fallback"
    build: str
    rtt_s: float


class RemoteBackend(ShapedEngine):
    """The Backend interface over a llama-server (see the module's opening comment).

    Connecting reads ``/props`` and ``/v1/models`` and checks that the model fits BotPsy's
    format (ChatML control tokens, and single-token tool-call tags for XML tool calls); a model
    that does not is refused in plain words. ``cancel`` closes the stream, which stops the
    server's generation; a server that goes away mid-answer raises ModelError (the agent loop
    then keeps the partial reply, marked interrupted).
    """

    def __init__(
        self,
        engine: EngineSettings,
        settings: ModelSettings,
        *,
        url: str | None = None,
        api_key: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        address = url or engine.url
        if not address:
            raise ModelError("No engine address is set.", "Run `botpsy engine set URL`.")
        try:
            self.url = normalize_engine_url(address)
        except ValueError as exc:
            raise ModelError(f"The engine address is not usable: {exc}.") from exc
        problem = plain_http_problem(self.url, engine.allow_plain_http)
        if problem:
            raise ModelError(
                f"Refusing the engine: {problem}.",
                "Use https:// (llama-server --ssl-key-file/--ssl-cert-file, or a TLS proxy), or "
                "an SSH tunnel to http://127.0.0.1:PORT; or, knowing that, turn on "
                "engine.allow_plain_http (Settings > Model, or `botpsy engine set URL "
                "--allow-plain-http`).",
            )
        self.settings = settings
        self.engine = engine
        headers = {"User-Agent": f"botpsy-desktop/{__version__}"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # a short request (health, settings, tokens) must answer soon; a stream may be silent
        # for read_timeout_s while a long prompt is evaluated, and lasts answer_timeout_s at most
        self._timeout = httpx.Timeout(
            engine.request_timeout_s,
            connect=engine.connect_timeout_s,
            pool=engine.connect_timeout_s,
        )
        self._stream_timeout = httpx.Timeout(
            engine.read_timeout_s, connect=engine.connect_timeout_s, pool=engine.connect_timeout_s
        )
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=self._timeout,
            follow_redirects=False,
            transport=transport,
        )
        self._lock = threading.Lock()
        self._tokenized: dict[str, list[int]] = {}
        self._grammars = ToolCallGrammars(settings, lambda: self._close_token)
        try:
            self.info = self._connect()
        except BaseException:
            self._http.close()
            raise
        self._slots = [_Slot(i) for i in range(max(self.info.slots, 1))]
        self._slots_known = False  # this process has not yet learnt where its conversations are
        self.last_timings: dict[str, Any] = {}
        """The server's own ``timings`` of the last completion (prompt_n, cache_n, ...)."""
        self.last_slot: int | None = None

    # -- connecting ------------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; connection problems and error answers become ModelError."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise ModelError(
                f"The engine at {self.url} did not answer in time ({type(exc).__name__}).",
                "Check that llama-server runs there and is not busy; `botpsy doctor` tests it.",
            ) from exc
        except httpx.HTTPError as exc:
            raise ModelError(
                f"Cannot reach the engine at {self.url}: {exc}.",
                "Check the address and that llama-server runs there (`botpsy engine show`).",
            ) from exc
        self._check_status(response)
        return response

    def _check_status(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            response.read()
            detail = response.json().get("error", {})
            message = detail.get("message") if isinstance(detail, Mapping) else str(detail)
        except (ValueError, AttributeError, httpx.HTTPError):
            message = response.text[:200] if response.is_stream_consumed else ""
        status = response.status_code
        if status == 401:
            raise ModelError(
                f"The engine at {self.url} refused the API key ({message or 'unauthorized'}).",
                "Store its key with `botpsy engine set URL --api-key-stdin`.",
            )
        if status == 503:
            raise ModelError(
                f"The engine at {self.url} is not ready ({message or 'loading the model'}).",
                "Wait until llama-server has loaded its model, then try again.",
            )
        raise ModelError(f"The engine at {self.url} answered {status}: {message or 'error'}.")

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise ModelError(
                f"The engine at {self.url} did not answer like a llama-server ({exc}).",
                "Check the address: it must be llama-server's own address.",
            ) from exc

    def _wrong(self, what: str, value: Any, wanted: str) -> ModelError:
        """The error for a value the server sent that is not what llama-server sends."""
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return ModelError(
            f"The engine at {self.url} sent {what} that is not {wanted} ({shown}): it does not "
            "behave like a llama-server, so its answer was not used.",
            "Check that the address is llama-server's own and that it runs a current build; "
            + WAY_BACK,
        )

    def _typed(self, value: Any, kind: type | tuple[type, ...], what: str, wanted: str) -> Any:
        """``value`` if it is of ``kind`` (a bool is no number), else the error naming it."""
        if isinstance(value, kind) and not (isinstance(value, bool) and bool not in _kinds(kind)):
            return value
        raise self._wrong(what, value, wanted)

    def _text(self, data: Mapping[str, Any], key: str, where: str) -> str:
        """A text field that may be absent or null."""
        value = data.get(key)
        if value is None:
            return ""
        return str(self._typed(value, str, f"{where} {key}", "text"))

    def _count(self, data: Mapping[str, Any], key: str, where: str) -> int:
        """A whole number >= 0 that may be absent or null (0)."""
        value = data.get(key)
        if value is None:
            return 0
        number = int(self._typed(value, int, f"{where} {key}", "a whole number"))
        if number < 0:
            raise self._wrong(f"{where} {key}", value, "a whole number of 0 or more")
        return number

    def _number(self, data: Mapping[str, Any], key: str, where: str) -> float:
        """A number (int or float) that may be absent or null (0)."""
        value = data.get(key)
        if value is None:
            return 0.0
        return float(self._typed(value, (int, float), f"{where} {key}", "a number"))

    def _connect(self) -> ServerInfo:
        started = time.perf_counter()
        self._request("GET", "/health")
        rtt = time.perf_counter() - started
        props = self._json(self._request("GET", "/props"))
        if not isinstance(props, Mapping) or "default_generation_settings" not in props:
            raise ModelError(
                f"{self.url} is not a llama-server (its /props says nothing of a model).",
                "Give the address llama-server listens on.",
            )
        where = "in /props"
        model = (
            self._text(props, "model_alias", where)
            or self._text(props, "model_path", where)
            or "unknown model"
        )
        model = model.replace("\\", "/").rsplit("/", 1)[-1]
        settings = props.get("default_generation_settings") or {}
        self._typed(settings, Mapping, "default_generation_settings", "an object")
        n_ctx = self._count(settings, "n_ctx", where)
        n_vocab: int | None = None
        try:
            listing = self._json(self._request("GET", "/v1/models"))
            meta = (listing.get("data") or [{}])[0].get("meta") or {}
            n_vocab = int(meta["n_vocab"]) if "n_vocab" in meta else None
        except (ModelError, AttributeError, IndexError, KeyError, TypeError, ValueError):
            n_vocab = None  # only shown: a server without it, or with it wrong, still works
        template = self._text(props, "chat_template", where) or None
        if template and "{%" not in template and "{{" not in template:
            raise ModelError(
                f"The engine runs {model} with the built-in chat template '{template[:40]}' "
                "instead of the model's own, so the app cannot render BotPsy's format for it.",
                "Start llama-server without --chat-template (the model's own template is used).",
            )
        self.renderer = PromptRenderer(
            template,
            bos_token=self._text(props, "bos_token", where),
            eos_token=self._text(props, "eos_token", where),
        )
        self._template = template or ""
        self._check_format(model)
        if n_ctx < 256:
            raise ModelError(
                f"The engine's model {model} has a context of {n_ctx} tokens per slot: too "
                "small for BotPsy's tool prompts.",
                "Start llama-server with a larger context (-c 32768 with --parallel 2 gives "
                "16384 per slot).",
            )
        self._close_token = self._single_token(TOOL_CALL_CLOSE)
        return ServerInfo(
            url=self.url,
            model=model,
            n_ctx=n_ctx,
            slots=self._count(props, "total_slots", where) or 1,
            n_vocab=n_vocab,
            template_source="fallback" if self.renderer.uses_fallback else "model",
            build=self._text(props, "build_info", where),
            rtt_s=rtt,
        )

    def _single_token(self, text: str) -> bool:
        return len(self.tokenize(text)) == 1

    def _check_format(self, model: str) -> None:
        """Refuse a model whose tokenizer or template cannot carry BotPsy's prompt format."""
        source = self._template or self.renderer.source  # the model's own, not our fallback
        if not all(token in source for token in CHATML_TOKENS):
            raise ModelError(
                f"The engine's model {model} does not fit BotPsy's format: its chat template "
                "does not write ChatML (<|im_start|> ... <|im_end|>), the format BotPsy's "
                "prompts, tool calls and tool results are written in.",
                "Run llama-server with BotPsy or another Qwen3/Qwen3.5-family model, without "
                "a --chat-template override.",
            )
        missing = [t for t in CHATML_TOKENS if not self._single_token(t)]
        if missing:
            raise ModelError(
                f"The engine's model {model} does not fit BotPsy's format: its tokenizer has no "
                f"{' or '.join(missing)} token, so the app's ChatML prompts would reach it as "
                "plain text.",
                "Run llama-server with BotPsy or another Qwen3/Qwen3.5-family model (or a "
                "ChatML model such as SmolLM2).",
            )
        if self.renderer.call_format == "xml":
            tags = [t for t in (TOOL_CALL_OPEN, TOOL_CALL_CLOSE) if not self._single_token(t)]
            if tags:
                raise ModelError(
                    f"The engine's model {model} has a chat template with BotPsy's tool calls "
                    f"but its tokenizer has no {' or '.join(tags)} token: tool calls could not "
                    "be constrained or read reliably.",
                    "Run llama-server with BotPsy or a Qwen3.5-family model.",
                )

    # -- the Backend interface -------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"llama-server:{self.info.model}@{self.url}"

    @property
    def n_ctx(self) -> int:
        return self.info.n_ctx

    def tokenize(self, text: str) -> list[int]:
        """The server's tokens of ``text`` (control tokens parsed, no BOS added)."""
        if not text:
            return []
        cached = self._tokenized.get(text)
        if cached is not None:
            return cached
        body = {"content": text, "add_special": False, "parse_special": True}
        data = self._typed(
            self._json(self._request("POST", "/tokenize", json=body)),
            Mapping,
            "a /tokenize answer",
            "an object",
        )
        listed = self._typed(data.get("tokens") or [], list, "/tokenize tokens", "a list")
        tokens = [self._typed(t, int, "a token", "a whole number") for t in listed]
        if len(self._tokenized) >= 8:
            self._tokenized.pop(next(iter(self._tokenized)))
        self._tokenized[text] = tokens
        return tokens

    def _prompt_tokens(self, prompt: str) -> list[int]:
        """Tokens of ``prompt``, reusing the tokens a slot holds of its beginning.

        Generated tokens (under a grammar especially) are not always how the tokenizer splits
        the same text; sending them back unchanged lets the server continue from its cache.
        """
        best = max(
            (s for s in self._slots if s.text and prompt.startswith(s.text)),
            key=lambda s: len(s.text),
            default=None,
        )
        if best is None:
            return self.tokenize(prompt)
        return [*best.tokens, *self.tokenize(prompt[len(best.text) :])]

    def count_tokens(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> int:
        rendered = self.renderer.render(messages, tools, enable_thinking=enable_thinking)
        return len(self._prompt_tokens(rendered.text))

    def _choose_slot(self, tokens: Sequence[int], continuing: bool) -> _Slot | None:
        """The slot for a request: a conversation's own slot (the longest shared start), a new
        conversation the least recently used one; None lets the server choose by similarity
        (a new process does not know where its conversation was left)."""
        if len(self._slots) == 1:
            return self._slots[0]
        if continuing:
            best = max(self._slots, key=lambda s: (_shared(s.tokens, tokens), s.used))
            if _shared(best.tokens, tokens) > 0:
                return best
            if not self._slots_known:
                return None
        return min(self._slots, key=lambda s: s.used)

    def carry(
        self, request: Request, cancel: threading.Event | None
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        """Generate one shaped request (``complete``) on the server. The server does not say
        which name its grammar refused: ``stats.wanted_tools`` stays empty here."""
        messages, tools, enable_thinking = request.messages, request.tools, request.enable_thinking
        continuing = sum(1 for m in messages if m.get("role") != "system") > 1
        started = time.perf_counter()
        prefix: GenerationStats | None = None
        if not continuing and messages and messages[0].get("role") == "system":
            # A new conversation: first the system prompt and tools alone (nothing generated).
            # llama-server keeps a checkpoint just before the end of each prompt, and a hybrid
            # model (BotPsy) can only go back to a checkpoint: every later new conversation,
            # from this process or another, then starts from there instead of re-evaluating
            # hundreds of prefix tokens. The request goes into the slot that holds the prefix.
            for step in self._warm_items(messages[:1], tools, enable_thinking, cancel):
                if isinstance(step, PromptProgress):
                    yield step
                elif isinstance(step, Completion):
                    prefix = step.stats
            prefix_s = time.perf_counter() - started
            continuing = True
        for item in self.generate(
            request.prompt, cancel=cancel, continuing=continuing, **request.options()
        ):
            if isinstance(item, Completion) and prefix is not None:
                # one request to the user: the prefix's evaluation and time count in its stats
                st = item.stats
                st.evaluated_tokens += prefix.evaluated_tokens
                st.reused_tokens = max(st.reused_tokens - prefix.evaluated_tokens, 0)
                st.prefill_s += prefix.prefill_s
                st.time_to_first_token_s += prefix_s
            yield item

    def warm(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
        cancel: threading.Event | None = None,
        progress: Callable[[PromptProgress], None] | None = None,
    ) -> GenerationStats:
        """Have the server evaluate now what the next request on ``messages`` starts with.

        Only the system prompt: the prefix, into the slot a new conversation gets next. A
        conversation: its history as the next request renders it (earlier thinking dropped),
        into its slot. Nothing is generated (``n_predict`` 0); ``progress`` hears the server's
        progress through the prompt."""
        for item in self._warm_items(messages, tools, enable_thinking, cancel):
            if isinstance(item, PromptProgress) and progress is not None:
                progress(item)
            elif isinstance(item, Completion):
                return item.stats
        return GenerationStats()

    def _warm_items(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        enable_thinking: bool,
        cancel: threading.Event | None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        head = self.conversation_head(messages, tools, enable_thinking=enable_thinking)
        if not head or (cancel is not None and cancel.is_set()):
            return
        continuing = any(m.get("role") != "system" for m in messages)
        yield from self.generate(
            head, cancel=cancel, max_tokens=0, continuing=continuing, warming=True
        )

    def conversation_head(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
    ) -> str:
        """The text the next request on ``messages`` starts with, up to its user turn's
        ``<|im_start|>`` (rendered twice with different placeholder user messages)."""
        head = self._before_user_turn(messages, tools, enable_thinking=enable_thinking)
        at = head.rfind(CHATML_TOKENS[0])
        return head[:at] if at > 0 else ""

    def generate(
        self,
        prompt: str,
        *,
        started_in_thinking: bool = False,
        grammar: str | None = None,
        cancel: threading.Event | None = None,
        max_tokens: int | None = None,
        force_tool_call: bool = False,
        continuing: bool = True,
        warming: bool = False,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        """Stream a completion of a rendered prompt from the server (see ``complete``)."""
        cancel = cancel or threading.Event()
        stats = GenerationStats()
        t_start = time.perf_counter()
        prompt = self._prompt_to_generate(prompt, grammar, started_in_thinking, force_tool_call)
        with self._lock:  # one request at a time from this process, as with the local engine
            tokens = self._prompt_tokens(prompt)
            stats.prompt_tokens = len(tokens)
            room = self._room_after(
                len(tokens),
                self.n_ctx,
                f"the engine's context of {self.n_ctx} tokens per slot",
                "Start a new conversation, or start llama-server with a larger context.",
            )
            limit = max_tokens if max_tokens is not None else self.settings.max_tokens
            limit = min(limit, room)
            slot = self._choose_slot(tokens, continuing)
            body = self.request_body(
                tokens, limit, slot, grammar, started_in_thinking, force_tool_call
            )
            lead = ""
            if force_tool_call:
                lead = TOOL_CALL_OPEN  # in the prompt already, and the start of the turn's text
                yield TextPiece(TOOL_CALL_OPEN, started_in_thinking)
            yield from self._stream(
                body,
                tokens,
                prompt,
                slot,
                stats,
                t_start,
                cancel,
                started_in_thinking,
                warming,
                lead,
            )

    def _trigger(self, started_in_thinking: bool) -> dict[str, Any]:
        """Where the grammar starts: at the ``<tool_call>`` token, but not inside open thinking
        (llama.cpp's trigger types: 0 a token, 2 a pattern whose first group starts it)."""
        if started_in_thinking:
            return {"type": 2, "value": r"</think>[\s\S]*?(<tool_call>)"}
        return {"type": 0, "value": TOOL_CALL_OPEN, "token": self.tokenize(TOOL_CALL_OPEN)[0]}

    def request_body(
        self,
        tokens: list[int],
        limit: int,
        slot: _Slot | None,
        grammar: str | None,
        started_in_thinking: bool,
        force_tool_call: bool,
    ) -> dict[str, Any]:
        """The /completion request: the prompt's tokens, the local engine's sampling, and the
        tool-call grammar (lazy from ``<tool_call>``, or from the start for a forced call,
        whose prompt already ends with ``<tool_call>``)."""
        s = self.settings
        body: dict[str, Any] = {
            "prompt": tokens,
            "n_predict": limit,
            "stream": True,
            "cache_prompt": True,
            "return_progress": True,
            "sse_ping_interval": SSE_PING_S,
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": s.min_p,
            # the local engine's sampler chain, and none of the server's extra penalties
            "samplers": ["top_k", "top_p", "min_p", "temperature"],
            "repeat_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "dry_multiplier": 0.0,
            "xtc_probability": 0.0,
            "typical_p": 1.0,
            "response_fields": _FINAL_FIELDS,
        }
        if s.seed >= 0:
            body["seed"] = s.seed
        body["id_slot"] = slot.index if slot is not None else -1
        if grammar is not None:
            if force_tool_call:
                body["grammar"] = grammar
            else:
                body["grammar"] = remote_tool_call_grammar(grammar)
                body["grammar_lazy"] = True
                body["grammar_triggers"] = [self._trigger(started_in_thinking)]
        return body

    def _stream(
        self,
        body: dict[str, Any],
        tokens: list[int],
        prompt: str,
        slot: _Slot | None,
        stats: GenerationStats,
        t_start: float,
        cancel: threading.Event,
        thinking: bool,
        warming: bool,
        lead: str = "",
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        text_parts: list[str] = []
        generated: list[int] = []
        final: Mapping[str, Any] | None = None
        t_first = 0.0
        t_last = 0.0
        finish = "length"
        served_slot = slot.index if slot is not None else None
        limit = int(body.get("n_predict", self.settings.max_tokens))
        pieces = 0  # streamed pieces with text or tokens: each is at least one token
        request = self._http.build_request(
            "POST", "/completion", json=body, timeout=self._stream_timeout
        )
        watch = _Watch(
            cancel,
            answer_s=self.engine.answer_timeout_s,
            silence_s=self.engine.read_timeout_s,
        )
        try:
            response = self._http.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise ModelError(
                f"The engine at {self.url} did not answer in time ({type(exc).__name__}).",
                "Check that llama-server runs there and is not busy; " + WAY_BACK,
            ) from exc
        except httpx.HTTPError as exc:
            raise ModelError(
                f"Cannot reach the engine at {self.url}: {exc}.",
                "Check the address and that llama-server runs there (`botpsy engine show`).",
            ) from exc
        watch.response = response
        stopper = threading.Thread(target=watch.run, name="engine-stop", daemon=True)
        try:
            self._check_status(response)
            stopper.start()
            for line in response.iter_lines():
                if cancel.is_set():
                    finish = "cancelled"
                    break
                if not line.startswith("data:"):
                    if line.startswith("error:"):
                        raise ModelError(f"The engine at {self.url} failed: {line[6:].strip()}")
                    continue  # blank lines and ": ping" comments (not an answer: see _Watch)
                watch.heard()
                chunk = self._typed(json.loads(line[5:]), Mapping, "a stream line", "an object")
                if "error" in chunk:
                    message = chunk["error"]
                    if isinstance(message, Mapping):
                        message = message.get("message", message)
                    raise ModelError(f"The engine at {self.url} failed: {message}.")
                slot_id = chunk.get("id_slot")
                if isinstance(slot_id, int) and not isinstance(slot_id, bool) and slot_id >= 0:
                    served_slot = slot_id
                evaluating = chunk.get("prompt_progress")
                if evaluating is not None and not chunk.get("content"):
                    where = "in prompt_progress"
                    self._typed(evaluating, Mapping, "prompt_progress", "an object")
                    cached = self._count(evaluating, "cache", where)
                    yield PromptProgress(
                        max(self._count(evaluating, "processed", where) - cached, 0),
                        max(self._count(evaluating, "total", where) - cached, 0),
                        self._number(evaluating, "time_ms", where) / 1000,
                    )
                    continue
                piece = self._text(chunk, "content", "in a stream line")
                new_tokens = self._typed(
                    chunk.get("tokens") or [], list, "a stream line's tokens", "a list"
                )
                if new_tokens and not t_first:
                    t_first = time.perf_counter()
                    stats.time_to_first_token_s = t_first - t_start
                generated += [
                    self._typed(t, int, "a streamed token", "a whole number") for t in new_tokens
                ]
                if piece or new_tokens:
                    pieces += 1
                    # one more: the end-of-turn token some servers list after the last one
                    if max(len(generated), pieces) > limit + 1:
                        raise ModelError(
                            f"The engine at {self.url} went on past the {limit} tokens this "
                            "answer was allowed, so it was cut off there; what it wrote up to "
                            "then is kept.",
                            "Check that the address is llama-server's own; " + WAY_BACK,
                        )
                if piece:
                    t_last = time.perf_counter()
                    text_parts.append(piece)
                    yield TextPiece(piece, thinking)
                if chunk.get("stop"):
                    final = chunk
                    break
        except (httpx.HTTPError, httpx.StreamError, OSError) as exc:
            if cancel.is_set():
                finish = "cancelled"
            elif watch.reason:
                raise ModelError(
                    f"The engine at {self.url} {watch.reason}, so the answer was cut off; what "
                    "it wrote up to then is kept.",
                    "Check that llama-server runs there and is not overloaded (engine."
                    "read_timeout_s and engine.answer_timeout_s set the limits); " + WAY_BACK,
                ) from exc
            else:
                raise ModelError(
                    f"The engine at {self.url} stopped answering mid-reply "
                    f"({type(exc).__name__}: {exc}).",
                    "The partial reply is kept; check that llama-server still runs, then ask "
                    "again.",
                ) from exc
        except json.JSONDecodeError as exc:
            raise ModelError(
                f"The engine at {self.url} sent a malformed reply ({exc}).",
                "Check that the address is llama-server's own; " + WAY_BACK,
            ) from exc
        finally:
            watch.done.set()
            response.close()
        if final is None and finish != "cancelled":
            if cancel.is_set():
                finish = "cancelled"
            else:
                raise ModelError(
                    f"The engine at {self.url} ended the reply without finishing it.",
                    "The partial reply is kept; check that llama-server still runs, then ask "
                    "again.",
                )
        text = "".join(text_parts)
        timings: Mapping[str, Any] = {}
        if final is not None:
            where = "in the final stream line"
            timings = self._typed(final.get("timings") or {}, Mapping, "timings", "an object")
            stop_type = self._text(final, "stop_type", where)
            finish = "stop" if stop_type in ("eos", "word") else "length"
            if stop_type == "eos" and generated:
                # the stream lists the end-of-turn token, which is neither text nor evaluated:
                # the template writes it again in the next prompt
                generated = generated[:-1]
            if final.get("truncated"):
                finish = "length"
        for stop in _TEXT_STOPS:
            if text.endswith(stop):
                text = text[: -len(stop)]
                finish = "stop"
        where = "in timings"
        stats.reused_tokens = self._count(timings, "cache_n", where)
        stats.evaluated_tokens = self._count(timings, "prompt_n", where)
        stats.prefill_s = self._number(timings, "prompt_ms", where) / 1000
        self.last_timings = dict(timings)
        stats.completion_tokens = len(generated)
        if t_first and t_last > t_first:
            stats.decode_s = t_last - t_first
        if warming or not t_first:
            stats.time_to_first_token_s = stats.time_to_first_token_s or (
                time.perf_counter() - t_start
            )
        self._remember(served_slot, prompt, tokens, text, generated, finish)
        if cancel.is_set() and final is None:
            finish = "cancelled"
        yield Completion(lead + text, finish, stats, thinking)  # type: ignore[arg-type]

    def _remember(
        self,
        served: int | None,
        prompt: str,
        tokens: list[int],
        text: str,
        generated: list[int],
        finish: str,
    ) -> None:
        """Note what the serving slot now holds (prompt and reply), for the next request."""
        if served is None or not 0 <= served < len(self._slots):
            return
        self._slots_known = True
        self.last_slot = served
        slot = self._slots[served]
        slot.used = time.monotonic()
        if finish == "cancelled":
            # what the server kept of a stopped reply is unknown: only the prompt is sure
            slot.text, slot.tokens = prompt, list(tokens)
            return
        # the stopping token (end of turn) is not in the text; the slot holds what came before
        slot.text, slot.tokens = prompt + text, [*tokens, *generated]
        for other in self._slots:
            if other is not slot and other.tokens == slot.tokens:
                other.text, other.tokens = "", []

    def try_answer(self) -> None:
        """A two-token answer to a short request, read like any other (ModelError if the
        server does not answer as llama-server does): what `botpsy engine set` proves."""
        for _ in self.complete(
            [{"role": "user", "content": "Say hello."}], [], enable_thinking=False, max_tokens=2
        ):
            pass

    def round_trip_s(self, n: int = 3) -> float:
        """The median time of ``n`` GET /health round trips."""
        times = []
        for _ in range(n):
            started = time.perf_counter()
            self._request("GET", "/health")
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    def prefix_cache_check(self) -> tuple[bool, str]:
        """Whether the server reuses a prompt's start: the same prompt twice, nothing generated;
        the second must evaluate (almost) nothing. Uses the least recently used slot."""
        system = {"role": "system", "content": "botpsy doctor: does the engine cache prompts? " * 8}
        head = self.conversation_head([system], [])
        evaluated = []
        for again in (False, True):  # the second time into the same slot
            stats = None
            for item in self.generate(head, max_tokens=0, continuing=again, warming=True):
                if isinstance(item, Completion):
                    stats = item.stats
            evaluated.append(stats.evaluated_tokens if stats else -1)
        total = len(self.tokenize(head))
        ok = 0 <= evaluated[1] < total and evaluated[1] <= max(4, total // 10)
        return ok, f"{total}-token prompt evaluated {evaluated[0]}, then {evaluated[1]} tokens"

    def close(self) -> None:
        self._http.close()


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


class _Watch:
    """Closes a stream when the person stops, when it has lasted ``answer_s`` in all, or when
    ``silence_s`` passed with no data (keep-alive pings are not data): the read in progress
    then fails at once, and ``reason`` says which limit it was."""

    def __init__(self, cancel: threading.Event, *, answer_s: float, silence_s: float) -> None:
        self.cancel = cancel
        self.done = threading.Event()
        self.response: Any = None
        self.answer_s = answer_s
        self.silence_s = silence_s
        self.started = self.last_data = time.monotonic()
        self.reason = ""

    def heard(self) -> None:
        self.last_data = time.monotonic()

    def run(self) -> None:
        while not self.done.is_set():
            if self.cancel.wait(0.05):
                break
            now = time.monotonic()
            if now - self.started > self.answer_s:
                self.reason = f"was still answering after {self.answer_s:g} s"
                break
            if now - self.last_data > self.silence_s:
                self.reason = (
                    f"sent nothing of an answer for {self.silence_s:g} s (keep-alive pings "
                    "are not an answer)"
                )
                break
        if not self.done.is_set() and self.response is not None:
            self.response.close()


def connect(
    engine: EngineSettings,
    settings: ModelSettings,
    *,
    url: str | None = None,
    api_key: str | None = None,
) -> RemoteBackend:
    return RemoteBackend(engine, settings, url=url, api_key=api_key)
