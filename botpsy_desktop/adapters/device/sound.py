"""The computer's sound: volume, mute and output of the default output device.

Spoken to through PulseAudio's client API with pulsectl (a ctypes binding of libpulse, kept up
since 2016, made for exactly this), which PipeWire answers as well through pipewire-pulse, the
sound server of current Linux desktops. A connection is made per call: it takes a millisecond
on the local socket, and a sound server that restarted (a login, a Bluetooth headset) is then
never talked to through a dead connection. Windows and macOS are not supported yet: there the
tools say so.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.core.errors import ToolError

_NO_SERVER = (
    "No sound server answered (PulseAudio or PipeWire's pulse server): {}. Sound can be "
    "changed once the desktop's sound service runs."
)


@dataclass(frozen=True)
class Output:
    """One output device: its server name, the name a person reads, volume and mute."""

    name: str
    description: str
    volume: int
    muted: bool
    default: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "volume": self.volume,
            "muted": self.muted,
            "default": self.default,
        }


class Sound:
    """The default output's volume and mute, and the choice of output, on one sound server.

    ``server``: the server's address (``unix:/run/user/1000/pulse/native``); None: the one
    libpulse finds ($PULSE_SERVER, the session's).
    """

    def __init__(self, server: str | None = None) -> None:
        self.server = server

    @contextmanager
    def _pulse(self) -> Iterator[Any]:
        if sys.platform not in ("linux", "freebsd"):
            raise ToolError(
                "Changing the sound is supported on Linux (PulseAudio or PipeWire) only so far."
            )
        try:
            import pulsectl
        except ImportError as exc:  # libpulse missing
            raise ToolError(_NO_SERVER.format(f"the sound library is missing ({exc})")) from exc
        try:
            pulse = pulsectl.Pulse("botpsy-desktop", server=self.server)
        except Exception as exc:  # pulsectl.PulseError and the OS errors under it
            raise ToolError(_NO_SERVER.format(exc)) from exc
        try:
            yield pulse
        except pulsectl.PulseError as exc:
            raise ToolError(f"The sound server refused the change: {exc}") from exc
        finally:
            pulse.close()

    @staticmethod
    def _output(pulse: Any, sink: Any, default_name: str) -> Output:
        return Output(
            name=str(sink.name),
            description=str(sink.description or sink.name),
            volume=round(float(sink.volume.value_flat) * 100),
            muted=bool(sink.mute),
            default=sink.name == default_name,
        )

    def _default(self, pulse: Any) -> Any:
        name = pulse.server_info().default_sink_name
        sinks = pulse.sink_list()
        for sink in sinks:
            if sink.name == name:
                return sink
        if sinks:
            return sinks[0]
        raise ToolError("The sound server has no output device (no speakers or headphones).")

    def state(self) -> dict[str, Any]:
        """The default output and every other one."""
        with self._pulse() as pulse:
            default = self._default(pulse)
            outputs = [self._output(pulse, s, default.name) for s in pulse.sink_list()]
            now = self._output(pulse, default, default.name)
        return {
            "output": now.description,
            "volume": now.volume,
            "muted": now.muted,
            "outputs": [o.as_dict() for o in outputs],
        }

    def set_volume(self, percent: int) -> tuple[int, int]:
        """Set the default output's volume (0-100); (before, after) in percent."""
        percent = max(0, min(100, int(percent)))
        with self._pulse() as pulse:
            sink = self._default(pulse)
            before = round(float(sink.volume.value_flat) * 100)
            pulse.volume_set_all_chans(sink, percent / 100)
            after = round(float(self._default(pulse).volume.value_flat) * 100)
        return before, after

    def volume(self) -> int:
        with self._pulse() as pulse:
            return round(float(self._default(pulse).volume.value_flat) * 100)

    def muted(self) -> bool:
        with self._pulse() as pulse:
            return bool(self._default(pulse).mute)

    def set_muted(self, muted: bool) -> tuple[bool, bool]:
        """Mute or unmute the default output; (before, after)."""
        with self._pulse() as pulse:
            sink = self._default(pulse)
            before = bool(sink.mute)
            pulse.mute(sink, muted)
            after = bool(self._default(pulse).mute)
        return before, after

    def set_output(self, wanted: str) -> tuple[str, str]:
        """Make the output whose name or description holds ``wanted`` the default (moving what
        plays there); (before, after) as descriptions."""
        needle = wanted.strip().casefold()
        with self._pulse() as pulse:
            before = self._default(pulse)
            sinks = pulse.sink_list()
            found = [
                s
                for s in sinks
                if needle in str(s.description).casefold() or needle == str(s.name).casefold()
            ]
            if not found:
                names = ", ".join(f"“{s.description}”" for s in sinks) or "none"
                raise ToolError(f"No output is called “{wanted}”. The outputs: {names}.")
            if len(found) > 1:
                names = ", ".join(f"“{s.description}”" for s in found)
                raise ToolError(f"Several outputs match “{wanted}”: {names}. Say which one.")
            target = found[0]
            pulse.sink_default_set(target)
            for stream in pulse.sink_input_list():  # what plays now follows the new default
                pulse.sink_input_move(stream.index, target.index)
        return str(before.description), str(target.description)

    def output_name(self) -> str:
        with self._pulse() as pulse:
            return str(self._default(pulse).description)
