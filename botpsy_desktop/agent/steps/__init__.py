"""The steps of one request, in the order agent/loop.py takes them, one module each.

1. ``tools_offered``: select the tools the request is offered (and the conversation keeps).
2. ``prompt``: render the stored conversation into the prompt that fits the model's context.
3. ``stream``: stream the model's turn to the person, holding back a "cannot" answer.
4. ``parse``: read the finished turn: an answer, or tool calls with their rows.
5. ``decide``: the gate's verdict on a call, and the person's approval when it asks.
6. ``carry_out``: run an allowed call on its own thread, within its time.
7. ``record``: log a change before and after it runs, and the call's row for the model.

``parked`` finds where a stored background run stopped, for agent/loop.py ``resume``.
"""
