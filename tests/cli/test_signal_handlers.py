"""A Ctrl-C or SIGTERM that lands while the main thread waits on the event it sets never hangs.

A signal handler runs in the main thread between two bytecodes, possibly while that thread holds
the event's internal lock (inside ``Event.wait``, as ``botpsy daemon``'s loop and the model
owners' cancel polls do): a handler calling ``event.set()`` there would wait for that lock
forever. The handlers are called here while the lock is held, as a signal can find it.
"""

from __future__ import annotations

import threading

from botpsy_desktop.cli.common import set_from_signal_handler
from botpsy_desktop.cli.turns import CtrlC


def _call_while_the_lock_is_held(event: threading.Event, handler: object) -> bool:
    """Call ``handler`` with the event's lock held; True when it returned (did not hang)."""
    returned = threading.Event()

    def in_the_waiting_thread() -> None:
        with event._cond:  # what Event.wait holds around its own wait
            handler()  # type: ignore[operator]
            returned.set()

    thread = threading.Thread(target=in_the_waiting_thread, daemon=True)
    thread.start()
    thread.join(10)
    return returned.is_set()


def test_the_shared_setter_returns_at_once_and_the_event_is_set_after() -> None:
    stop = threading.Event()
    assert _call_while_the_lock_is_held(stop, lambda: set_from_signal_handler(stop))
    assert stop.wait(10)


def test_ctrl_c_during_a_request_cancels_it_without_taking_the_lock() -> None:
    cancel = threading.Event()
    ctrl_c = CtrlC(cancel)
    ctrl_c.working = True
    assert _call_while_the_lock_is_held(cancel, lambda: ctrl_c._on_sigint(2, None))
    assert cancel.wait(10)
