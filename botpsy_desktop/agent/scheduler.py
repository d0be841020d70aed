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

from botpsy_desktop.agent.approvals import ApprovalQueue, RoutineInfo, StoredApproval
from botpsy_desktop.agent.events import ApprovalNeeded, ApprovalRequest, Error, Event
from botpsy_desktop.agent.loop import NOBODY_IN_TIME, AgentSession
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
    """The request has the engine now (again, after being parked)."""

    request_id: str


@dataclass(frozen=True)
class Parked:
    """The request gave the engine up while its approval request ``call_id`` waits for the
    user; others run meanwhile. It is queued again when that is decided, when Stop is pressed
    or after ``timeout_s`` (None: no limit), and then goes on where it stopped."""

    request_id: str
    call_id: str
    timeout_s: float | None


@dataclass(frozen=True)
class Park:
    """Yielded by a job (never put on its stream): give the engine up until ``approval`` is
    decided, the request is stopped or ``timeout_s`` passes. The job's iterator is kept as it
    is and resumed on the engine thread; it then reads ``approval.decided`` to see which."""

    approval: ApprovalRequest
    timeout_s: float | None
    keep: bool = False
    """The run is stored (agent/approvals.py): closing the scheduler leaves it waiting for the
    next start (it ends ``suspended``) instead of denying its approval."""


FinishState = Literal["done", "cancelled", "preempted", "failed", "suspended"]


@dataclass(frozen=True)
class Finished:
    """The request is over: ``done``, ``cancelled`` (Stop), ``preempted`` (a warm-up gave way to
    a user request), ``failed`` (the job raised; ``error`` says what) or ``suspended`` (parked
    and stored when the scheduler closed: it goes on after a restart). Always the last item.
    """

    request_id: str
    state: FinishState
    error: str = ""
    started: bool = True
    """False when it ended while still queued (it never had the engine)."""


Progress = Queued | Running | Parked | Finished
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

    def storing(self, on: bool) -> None:
        """Say that this run's approval is being stored, on its way to park (``True``), or
        that it parked or went on (``False``): a scheduler that closes in between leaves the
        run to park and be suspended (its stored approval waits for the next start) instead
        of stopping it, which would deny the approval the row already holds."""
        self._scheduler._set_storing(self.request, on)

    def replace_backend(self, backend: Backend | None) -> None:
        """Close the current model (if any) and use ``backend`` from the next request on."""
        old, self._scheduler._backend = self._scheduler._backend, backend
        if old is not None and old is not backend:
            old.close()


Job = Callable[[EngineContext], Iterable[Event | Park] | None]
"""The work of one request, run on the engine thread; the events it yields reach its stream,
a :class:`Park` gives the engine up until its approval is decided."""


class Request:
    """A handle on one submitted request: its id, Stop, progress and its own event stream.

    Read the stream with :meth:`events` (one reader), or pass ``on_item`` to ``submit`` to be
    called with every item on the thread that produced it. :attr:`state` is ``queued``,
    ``running``, ``parked`` (waiting for an approval, not holding the engine) or a
    :data:`FinishState`.
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
        self.state: Literal["queued", "running", "parked"] | FinishState = "queued"
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
        self._order = 0  # its place among requests of its priority, kept when it is parked
        self._items_left: Iterator[Event | Park] | None = None  # a started job's iterator
        self._parked_until: float | None = None  # monotonic deadline while parked
        self._keep = False  # parked with a stored approval: suspended, not denied, at close
        self._storing = False  # its approval stored, not yet parked: closing lets it park

    def cancel(self) -> None:
        """Stop it: a queued request is dropped at once, a running one stops within a token."""
        self._scheduler._cancel(self)

    @property
    def kept_at_close(self) -> bool:
        """Parked with its approval stored, or storing it on its way to park: closing the
        scheduler suspends it (it goes on after a restart), so a closing face leaves it alone
        instead of stopping it."""
        return (self.state == "parked" and self._keep) or self._storing

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

    A job waiting for an approval nobody is looking at (a background run) yields a
    :class:`Park`: it gives the engine up, its iterator kept as it stands (the conversation is
    in the store, the pending call in the loop's frame), and the next request runs. Once the
    approval is decided, the request is stopped or the park's timeout passes, it is queued
    again in its old place and goes on on the engine thread as if it had waited there.
    """

    def __init__(self, backend: Backend | None = None, *, name: str = "botpsy-engine") -> None:
        self._backend = backend
        self._lock = threading.RLock()  # on_item callbacks may submit or cancel
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[int, int, Request]] = []
        self._order = itertools.count()
        self._running: Request | None = None
        self._parked: list[Request] = []
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
            request._order = next(self._order)
            heapq.heappush(self._heap, (int(request.priority), request._order, request))
            self._announce_positions()
            self._wake.notify()
        return request

    def pending(self) -> list[Request]:
        """The requests waiting, in the order they will run."""
        with self._lock:
            return [r for _, _, r in sorted(self._heap)]

    def parked(self) -> list[Request]:
        """The requests parked while their approval waits, oldest first."""
        with self._lock:
            return list(self._parked)

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
                if request._items_left is not None:  # parked before: it winds up below
                    self._parked.append(request)
                else:
                    self._finish_queued(request, "cancelled")
            for request in self._parked:  # ended on the engine thread once it stops
                if not request._keep:
                    request.cancel_event.set()
            if self._running is not None and not self._running._storing:
                self._running.cancel_event.set()  # one storing its approval parks, then is kept
            self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- internals ----------------------------------------------------------------------------
    def _cancel(self, request: Request) -> None:
        with self._lock:
            request.cancel_event.set()
            if request.state == "parked":
                self._unpark(request)  # it ends (its approval denied) when it has the engine
                return
            if request.state != "queued" or request._items_left is not None:
                return  # running or resumed: its job sees the event; finished: nothing to do
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

    def _set_storing(self, request: Request, on: bool) -> None:
        with self._lock:
            request._storing = on
            if not on and self._closing and request.state == "running":
                request.cancel_event.set()  # it went on instead of parking: stopped as close() does

    def _park(self, request: Request, park: Park) -> None:
        """Called on the engine thread when ``request``'s job yields ``park``."""
        with self._lock:
            request.state = "parked"
            request._parked_until = (
                None if park.timeout_s is None else time.monotonic() + park.timeout_s
            )
            request._keep = park.keep
            self._parked.append(request)
        request._put(Parked(request.id, park.approval.call_id, park.timeout_s))
        # decided from any thread (or already): queue it again
        park.approval.on_decided(lambda: self._unpark(request))

    def _unpark(self, request: Request) -> None:
        """Queue a parked request again, in its old place; a no-op if it is not parked."""
        with self._lock:
            if self._closing or request not in self._parked:
                return  # closing: the engine thread winds every parked request up
            self._parked.remove(request)
            request.state = "queued"
            request._parked_until = None
            # a stopped run only winds up (no model turn): it goes first, it takes no time
            first = request.cancel_event.is_set()
            rank = int(Priority.CONTROL if first else request.priority)
            heapq.heappush(self._heap, (rank, request._order, request))
            self._announce_positions()
            self._wake.notify()

    def _wake_overdue(self) -> float | None:
        """Called with the lock held: queue parked requests whose time is up; returns the
        seconds until the next one's is (None: no deadline)."""
        now = time.monotonic()
        due = [r for r in self._parked if r._parked_until is not None and r._parked_until <= now]
        for request in due:
            self._unpark(request)
        deadlines = [r._parked_until for r in self._parked if r._parked_until is not None]
        return max(min(deadlines) - now, 0.0) if deadlines else None

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._closing:
                    left = self._wake_overdue()
                    if self._heap:
                        break
                    self._wake.wait(left)
                if self._closing:
                    break
                _, _, request = heapq.heappop(self._heap)
                request.state = "running"
                if request.started_at is None:
                    request.started_at = time.monotonic()
                self._running = request
                request._put(Running(request.id))
                self._announce_positions()
            self._run(request)
            with self._lock:
                self._running = None
                self._announce_positions()
        with self._lock:
            parked, self._parked = self._parked, []
        for request in parked:  # stopped by close(): each winds up (its approval denied)
            if request._keep:  # stored: it waits for the next start
                self._suspend(request)
                continue
            request.cancel_event.set()
            self._run(request)
        backend, self._backend = self._backend, None
        if backend is not None:
            with contextlib.suppress(Exception):  # closing must not fail the shutdown
                backend.close()

    def _suspend(self, request: Request) -> None:
        """End a parked request whose approval is stored, leaving it undecided: its job is
        closed where it stands (its approval stays in the stored queue for the next start)."""
        items, request._items_left = request._items_left, None
        if items is not None:
            close = getattr(items, "close", None)
            with contextlib.suppress(Exception):
                if close is not None:
                    close()
        with self._lock:
            request.state = "suspended"
            request.finished_at = time.monotonic()
        request._put(Finished(request.id, "suspended"))
        request._finished.set()

    def _run(self, request: Request) -> None:
        """Run (or resume) ``request``'s job until it ends or parks."""
        state: FinishState = "done"
        error = ""
        try:
            if request._items_left is None:
                request._items_left = iter(request.job(EngineContext(self, request)) or ())
            for item in request._items_left:
                if isinstance(item, Park):
                    if not (self._closing or request.cancel_event.is_set()):
                        self._park(request, item)
                        return  # the iterator waits, as it stands, until it is queued again
                    if item.keep and not request.cancel_event.is_set():
                        # closing while its stored approval was on its way here: kept, as a
                        # run parked before the close is
                        request._storing = False
                        self._suspend(request)
                        return
                    continue  # stopped or closing: it goes on at once (and sees why)
                request._put(item)
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
        request._items_left = None
        request._put(Finished(request.id, state, error))
        request._finished.set()


def session_job(
    make_session: Callable[[Backend], AgentSession],
    text: str,
    *,
    think: bool = False,
    no_model: str = "No model is loaded yet. Load one, then ask again.",
    origin: str | None = None,
    queue: ApprovalQueue | None = None,
    routine: RoutineInfo | None = None,
    resume: StoredApproval | None = None,
) -> Job:
    """A job that handles ``text`` in the session ``make_session`` builds on the shared model.

    ``origin``: the request is a stored one the user did not type (a routine of untrusted
    origin, see AgentSession.run): its calls all wait for the user, with the origin shown.

    An approval request of a run someone watches holds the engine until it is decided (from
    any thread) or the request is stopped (then it is denied). A background run's request (it
    waits in the gate's inbox) parks the run instead: the engine serves others until it is
    decided; if the run is stopped, or nobody decides within the session's
    background_approval_timeout_s, it is denied. An undecided approval never lets the call run.

    With ``queue`` (agent/approvals.py) a background run's approval is stored with ``routine``
    (who asked): it can be decided from any process, and a run parked when the scheduler
    closes stays waiting for the next start. ``resume``: instead of ``text``, go on with a
    stored run that an earlier process parked, with the decision the row holds (taken first,
    so that an approved call runs once).
    """

    def job(ctx: EngineContext) -> Iterator[Event | Park]:
        backend = ctx.backend
        if backend is None:
            yield Error("model", no_model)
            return
        session = make_session(backend)
        if resume is not None:
            assert queue is not None
            taken = queue.take(resume.id)
            if taken is None:
                yield Error("internal", "This approval was taken by another run; nothing ran.")
                return
            events = session.resume(taken.call_id, taken.decided(), cancel=ctx.cancel, think=think)
        else:
            events = session.run(text, cancel=ctx.cancel, think=think, origin=origin)
        for event in events:
            if isinstance(event, ApprovalNeeded) and event.request.background:
                approval = event.request
                timeout = session.settings.background_approval_timeout_s
                held: tuple[ApprovalQueue, int] | None = None  # its row, when stored
                if queue is not None and not approval.decided:
                    # stored before the run's event goes out: whoever hears of the approval
                    # (the daemon's line, a notification) can count on a restart keeping it,
                    # and a close from now until it parks keeps it too
                    ctx.storing(True)
                    try:
                        row = queue.park(
                            approval,
                            conversation_id=session.conversation_id,
                            routine=routine,
                            timeout_s=timeout,
                            think=think,
                        )
                    except BaseException:
                        ctx.storing(False)
                        raise
                    held = (queue, row.id)
                yield event
                if not approval.decided and not ctx.cancel.is_set():
                    yield Park(approval, timeout, keep=held is not None)
                if held is not None:
                    ctx.storing(False)
                if held is not None and not ctx.cancel.is_set():
                    stored_in, row_id = held
                    if stored_in.settle_live(row_id, approval) is None:
                        # not taken here (another process has it): this run must not act on it
                        with contextlib.suppress(RuntimeError):
                            approval.settle(False, "taken elsewhere")
                        approval.consume(
                            approval.tool, approval.edited_arguments or approval.arguments
                        )
                if not approval.decided:  # the run was stopped, or the time is up
                    with contextlib.suppress(RuntimeError):  # decided meanwhile
                        approval.deny(by="stopped" if ctx.cancel.is_set() else NOBODY_IN_TIME)
                if held is not None and ctx.cancel.is_set():
                    held[0].take(held[1])
            else:
                yield event
            if isinstance(event, ApprovalNeeded) and not event.request.background:
                while not event.request.decided:
                    if ctx.cancel.is_set():
                        with contextlib.suppress(RuntimeError):  # decided meanwhile
                            event.request.deny(by="stopped")
                        break
                    event.request.wait(0.05)

    return job
