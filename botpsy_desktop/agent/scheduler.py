"""One engine, many callers: requests queued by priority, run one at a time on the model thread."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

from botpsy_desktop.agent.events import ApprovalNeeded, Error, Event
from botpsy_desktop.agent.loop import AgentSession
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.backend import Backend


class Priority(IntEnum):
    """Who asked: lower runs first. Requests of one priority run in the order they came."""

    CONTROL = 0
    """Loading or closing a model: before anything still waiting."""
    INTERACTIVE = 1
    """A message the user typed in the window or on a terminal."""
    QUICK = 2
    """A command from the tray's quick-command box."""
    SCHEDULED = 3
    """A run started by a timer or the daemon, nobody watching."""
    WARMUP = 4
    """Evaluating ahead what the next request starts with; cancelled when the user asks."""


USER_PRIORITIES = (Priority.CONTROL, Priority.INTERACTIVE, Priority.QUICK)
"""Requests that pre-empt warm-ups: the user is waiting for them."""


@dataclass(frozen=True)
class Queued:
    """The request waits; ``ahead`` requests (the running one included) go before it."""

    request_id: str
    ahead: int


@dataclass(frozen=True)
class Running:
    """The request has the engine now."""

    request_id: str


FinishState = Literal["done", "cancelled", "preempted", "failed"]


@dataclass(frozen=True)
class Finished:
    """The request is over: ``done``, ``cancelled`` (Stop), ``preempted`` (a warm-up gave way to
    a user request) or ``failed`` (the job raised; ``error`` says what). Always the last item.
    """

    request_id: str
    state: FinishState
    error: str = ""
    started: bool = True
    """False when it ended while still queued (it never had the engine)."""


Progress = Queued | Running | Finished
Item = Event | Progress
"""What a request's stream carries: its progress and the agent events its job produced."""


class EngineContext:
    """What a job gets on the engine thread: the loaded backend, its Stop switch, its request."""

    def __init__(self, scheduler: RequestScheduler, request: Request) -> None:
        self._scheduler = scheduler
        self.request = request
        self.cancel = request.cancel_event

    @property
    def backend(self) -> Backend | None:
        """The model everyone shares (None until one is loaded)."""
        return self._scheduler._backend

    def replace_backend(self, backend: Backend | None) -> None:
        """Close the current model (if any) and use ``backend`` from the next request on."""
        old, self._scheduler._backend = self._scheduler._backend, backend
        if old is not None and old is not backend:
            old.close()


Job = Callable[[EngineContext], Iterable[Event] | None]
"""The work of one request, run on the engine thread; the events it yields reach its stream."""


class Request:
    """A handle on one submitted request: its id, Stop, progress and its own event stream.

    Read the stream with :meth:`events` (one reader), or pass ``on_item`` to ``submit`` to be
    called with every item on the thread that produced it. :attr:`state` is ``queued``,
    ``running`` or a :data:`FinishState`.
    """

    def __init__(
        self,
        scheduler: RequestScheduler,
        job: Job,
        priority: Priority,
        label: str,
        on_item: Callable[[Item], None] | None,
        request_id: str | None,
    ) -> None:
        self.id = request_id or uuid.uuid4().hex
        self.priority = priority
        self.label = label
        self.job = job
        self.cancel_event = threading.Event()
        self.state: Literal["queued", "running"] | FinishState = "queued"
        self.ahead: int | None = None
        self.error = ""
        self.submitted_at = time.monotonic()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self._scheduler = scheduler
        self._on_item = on_item
        self._items: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._finished = threading.Event()
        self._preempted = False

    def cancel(self) -> None:
        """Stop it: a queued request is dropped at once, a running one stops within a token."""
        self._scheduler._cancel(self)

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the request is over; True if it is."""
        return self._finished.wait(timeout)

    def events(self, timeout: float | None = None) -> Iterator[Item]:
        """Everything the request produced, in order, until (and including) its Finished item.

        ``timeout`` bounds each wait for the next item (``TimeoutError`` when it passes).
        """
        while True:
            try:
                item = self._items.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"request {self.id} produced nothing for {timeout} s") from None
            yield item
            if isinstance(item, Finished):
                return

    def _put(self, item: Item) -> None:
        self._items.put(item)
        if self._on_item is not None:
            self._on_item(item)


class RequestScheduler:
    """Owns the one loaded model and runs requests on one engine thread, by priority.

    Requests run one at a time, so no two generations ever share the model's context: the
    user's interactive messages first, then quick commands, then scheduled runs, then warm-ups.
    Within a priority, first come first served. A user request (control, interactive or quick)
    cancels a running warm-up and drops queued ones. Each waiting request hears how many go
    before it whenever that changes. A job that raises fails only its own request.
    """

    def __init__(self, backend: Backend | None = None, *, name: str = "botpsy-engine") -> None:
        self._backend = backend
        self._lock = threading.RLock()  # on_item callbacks may submit or cancel
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[int, int, Request]] = []
        self._order = itertools.count()
        self._running: Request | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    # -- callers ------------------------------------------------------------------------------
    def submit(
        self,
        job: Job,
        priority: Priority = Priority.INTERACTIVE,
        *,
        label: str = "",
        on_item: Callable[[Item], None] | None = None,
        request_id: str | None = None,
    ) -> Request:
        """Queue ``job``; returns its handle at once. After :meth:`close`, it ends cancelled."""
        request = Request(self, job, Priority(priority), label, on_item, request_id)
        with self._lock:
            if self._closing:
                self._finish_queued(request, "cancelled")
                return request
            if request.priority in USER_PRIORITIES:
                self._preempt_warmups()
            heapq.heappush(self._heap, (int(request.priority), next(self._order), request))
            self._announce_positions()
            self._wake.notify()
        return request

    def pending(self) -> list[Request]:
        """The requests waiting, in the order they will run."""
        with self._lock:
            return [r for _, _, r in sorted(self._heap)]

    @property
    def running(self) -> Request | None:
        return self._running

    @property
    def backend(self) -> Backend | None:
        """The loaded model; use it only from a job (on the engine thread)."""
        return self._backend

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def close(self, timeout: float | None = 10.0) -> None:
        """Cancel everything, close the model on the engine thread and end that thread."""
        with self._lock:
            self._closing = True
            waiting = [r for _, _, r in self._heap]
            self._heap.clear()
            for request in waiting:
                self._finish_queued(request, "cancelled")
            if self._running is not None:
                self._running.cancel_event.set()
            self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- internals ----------------------------------------------------------------------------
    def _cancel(self, request: Request) -> None:
        with self._lock:
            request.cancel_event.set()
            if request.state != "queued":
                return  # running: its job sees the event; finished: nothing to do
            self._heap = [e for e in self._heap if e[2] is not request]
            heapq.heapify(self._heap)
            self._finish_queued(request, "cancelled")
            self._announce_positions()

    def _preempt_warmups(self) -> None:
        """Called with the lock held: a user request goes before any warm-up."""
        running = self._running
        if running is not None and running.priority is Priority.WARMUP:
            running._preempted = True
            running.cancel_event.set()
        kept = [e for e in self._heap if e[2].priority is not Priority.WARMUP]
        if len(kept) != len(self._heap):
            for _, _, request in self._heap:
                if request.priority is Priority.WARMUP:
                    request.cancel_event.set()
                    self._finish_queued(request, "preempted")
            self._heap = kept
            heapq.heapify(self._heap)

    def _finish_queued(self, request: Request, state: FinishState) -> None:
        request.state = state
        request.finished_at = time.monotonic()
        request._put(Finished(request.id, state, started=False))
        request._finished.set()

    def _announce_positions(self) -> None:
        """Called with the lock held: tell each waiting request how many go before it."""
        busy = 1 if self._running is not None else 0
        for position, (_, _, request) in enumerate(sorted(self._heap)):
            ahead = busy + position
            if ahead and request.ahead != ahead:  # nothing ahead: it starts right away
                request.ahead = ahead
                request._put(Queued(request.id, ahead))

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._heap and not self._closing:
                    self._wake.wait()
                if self._closing:
                    break
                _, _, request = heapq.heappop(self._heap)
                request.state = "running"
                request.started_at = time.monotonic()
                self._running = request
                request._put(Running(request.id))
                self._announce_positions()
            self._run(request)
            with self._lock:
                self._running = None
                self._announce_positions()
        backend, self._backend = self._backend, None
        if backend is not None:
            with contextlib.suppress(Exception):  # closing must not fail the shutdown
                backend.close()

    def _run(self, request: Request) -> None:
        state: FinishState = "done"
        error = ""
        try:
            produced = request.job(EngineContext(self, request))
            for event in produced or ():
                request._put(event)
        except Exception as exc:  # one request's bug must not end the engine thread
            state = "failed"
            error = str(exc) if isinstance(exc, BotpsyError) else f"{type(exc).__name__}: {exc}"
            request._put(Error("internal", error))
        if state == "done" and request.cancel_event.is_set():
            state = "preempted" if request._preempted else "cancelled"
        with self._lock:
            request.state = state
            request.error = error
            request.finished_at = time.monotonic()
        request._put(Finished(request.id, state, error))
        request._finished.set()


def session_job(
    make_session: Callable[[Backend], AgentSession],
    text: str,
    *,
    think: bool = False,
    no_model: str = "No model is loaded yet. Load one, then ask again.",
    origin: str | None = None,
) -> Job:
    """A job that handles ``text`` in the session ``make_session`` builds on the shared model.

    ``origin``: the request is a stored one the user did not type (a routine of untrusted
    origin, see AgentSession.run): its calls all wait for the user, with the origin shown.

    An approval request holds the engine until someone decides it (from any thread) or the
    request is stopped (then it is denied): an undecided approval never lets the call run.
    """

    def job(ctx: EngineContext) -> Iterator[Event]:
        backend = ctx.backend
        if backend is None:
            yield Error("model", no_model)
            return
        session = make_session(backend)
        for event in session.run(text, cancel=ctx.cancel, think=think, origin=origin):
            yield event
            # a background run's request waits in the gate's inbox, inside the loop
            if isinstance(event, ApprovalNeeded) and not event.request.background:
                while not event.request.decided:
                    if ctx.cancel.is_set():
                        with contextlib.suppress(RuntimeError):  # decided meanwhile
                            event.request.deny(by="stopped")
                        break
                    event.request.wait(0.05)

    return job
