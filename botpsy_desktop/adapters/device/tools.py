"""The device tools: sound, do not disturb, appearance, brightness, power and status, opening
files, web addresses and apps, locking the screen.

Each change is declared once for the gate like every other tool: a small local change with its
inverse (the value that was there before, with what the change left as ``expect``, so that an
Undo after the person moved the slider themselves asks and says so). Opening a web address
sends the address out (declared in ``sends``: one that came from a mail or a file asks);
files and apps are confined to the allowed folders. Nothing here sends, deletes or spends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.adapters.alarms.when import format_when, parse_duration, parse_when
from botpsy_desktop.adapters.device.desktop import DesktopSettings
from botpsy_desktop.adapters.device.launch import (
    check_web_address,
    find_app,
    launch,
    lock_screen,
    open_with_default,
)
from botpsy_desktop.adapters.device.power import Power, system_status
from botpsy_desktop.adapters.device.sound import Sound
from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import (
    Effect,
    Inverse,
    InverseRule,
    StateRule,
    Tier,
    Tool,
    current_call_context,
    make_tool,
)


class SoundStatusArgs(BaseModel):
    """The computer's sound now: volume, muted or not, the output in use and the others."""


class SetVolumeArgs(BaseModel):
    """Change the computer's sound volume (all its sound, not only the music): to a level, or
    up or down by some points ("a bit": 10)."""

    percent: int | None = Field(None, ge=0, le=100, description="The level to set, 0-100.")
    change: int | None = Field(
        None, ge=-100, le=100, description="Points to add (up) or take away (down, negative)."
    )

    @model_validator(mode="after")
    def one_of(self) -> SetVolumeArgs:
        if (self.percent is None) == (self.change is None):
            raise ValueError("give either percent (a level) or change (up or down), not both")
        return self


_UNTIL = (
    'Until when, e.g. "in an hour", "for 30 minutes", "15:00", "3pm"; leave out for no end. '
    "At that time it is set back, unless changed since."
)


class MuteSoundArgs(BaseModel):
    """Mute the computer's sound, or unmute it; for a while if asked ("mute for an hour")."""

    mute: bool = Field(True, description="true: mute; false: unmute.")
    until: str | None = Field(None, description=_UNTIL, max_length=100)


class ChooseSoundOutputArgs(BaseModel):
    """Send the computer's sound to another output (speakers, headphones, a monitor)."""

    output: str = Field(description="The output's name, or part of it.", max_length=200)


class SetDoNotDisturbArgs(BaseModel):
    """Turn do not disturb on (notifications stay silent, no pop-ups) or off; until a time if
    asked ("don't disturb me until 3")."""

    on: bool = Field(description="true: do not disturb; false: notifications again.")
    until: str | None = Field(None, description=_UNTIL, max_length=100)


class SetAppearanceArgs(BaseModel):
    """Switch the desktop between dark mode and light mode."""

    mode: Literal["dark", "light"]


class SetBrightnessArgs(BaseModel):
    """Change the screen's brightness: to a level, or up or down by some points."""

    percent: int | None = Field(None, ge=1, le=100, description="The level to set, 1-100.")
    change: int | None = Field(
        None, ge=-100, le=100, description="Points to add (brighter) or take away (dimmer)."
    )

    @model_validator(mode="after")
    def one_of(self) -> SetBrightnessArgs:
        if (self.percent is None) == (self.change is None):
            raise ValueError("give either percent (a level) or change (up or down), not both")
        return self


class BatteryStatusArgs(BaseModel):
    """The battery's charge, whether it is charging or plugged in, and the time left."""


class SystemStatusArgs(BaseModel):
    """The computer's state: free disk space, network connection, memory, and what uses the
    processor most."""


class OpenFileArgs(BaseModel):
    """Open a file or folder with the app the user chose for it (a document in its editor, a
    folder in the file manager)."""

    path: str = Field(
        description="The file or folder, inside the allowed folders.", max_length=4096
    )


class OpenWebAddressArgs(BaseModel):
    """Open a web page in the user's browser."""

    url: str = Field(description="The address, e.g. https://example.org/page.", max_length=2048)


class StartAppArgs(BaseModel):
    """Start an installed application by its name, optionally with a file to open in it."""

    name: str = Field(description='The app\'s name, e.g. "Calculator".', max_length=200)
    file: str | None = Field(
        None, description="A file for it to open, inside the allowed folders.", max_length=4096
    )


class LockScreenArgs(BaseModel):
    """Lock the screen (the user's password unlocks it)."""


def device_tools(
    roots: list[Path],
    *,
    sound: Sound | None = None,
    desktop: DesktopSettings | None = None,
    power: Power | None = None,
    alarms: AlarmService | None = None,
) -> list[Tool]:
    """The device tools; ``roots`` are the allowed folders (files and apps are confined there);
    ``alarms`` keeps the timed ways back ("mute for an hour"; agent/restores.py)."""
    sound = sound or Sound()
    desktop = desktop or DesktopSettings()
    power = power or Power()
    jail = FolderJail(roots)

    def sound_status(args: SoundStatusArgs) -> dict[str, Any]:
        return sound.state()

    def set_volume(args: SetVolumeArgs) -> dict[str, Any]:
        target = args.percent if args.percent is not None else sound.volume() + (args.change or 0)
        before, after = sound.set_volume(max(0, min(100, target)))
        return _changed("volume", before, after, f"Volume {before}% → {after}%")

    def way_back(until: str | None) -> Callable[[dict[str, Any], str], dict[str, Any]]:
        """Check ``until`` before the change; after it, schedule the way back."""
        at = _until(alarms, until) if until else None

        def then(result: dict[str, Any], words: str) -> dict[str, Any]:
            if at is None or alarms is None or result.get("before") == result.get("now"):
                return result
            call = current_call_context().call_id
            alarms.add(AlarmKind.RESTORE, at, label=words, origin=call)
            shown = format_when(at, alarms.now())
            result["until"] = shown
            result["message"] += f" until {shown}"
            return result

        return then

    def mute_sound(args: MuteSoundArgs) -> dict[str, Any]:
        then = way_back(args.until)
        before, after = sound.set_muted(args.mute)
        result = _changed("muted", before, after, "Sound muted" if after else "Sound on")
        return then(result, "Unmute the sound" if args.mute else "Mute the sound again")

    def choose_sound_output(args: ChooseSoundOutputArgs) -> dict[str, Any]:
        before, after = sound.set_output(args.output)
        return _changed("output", before, after, f"Sound now plays on “{after}” (was “{before}”)")

    def set_do_not_disturb(args: SetDoNotDisturbArgs) -> dict[str, Any]:
        then = way_back(args.until)
        before, after = desktop.set_do_not_disturb(args.on)
        result = _changed(
            "on", before, after, "Do not disturb is on" if after else "Do not disturb is off"
        )
        return then(result, f"Turn do not disturb {'off' if args.on else 'on'} again")

    def set_appearance(args: SetAppearanceArgs) -> dict[str, Any]:
        before, after = desktop.set_appearance(args.mode)
        return _changed("mode", before, after, f"Appearance {before} → {after}")

    def set_brightness(args: SetBrightnessArgs) -> dict[str, Any]:
        target = (
            args.percent if args.percent is not None else power.brightness() + (args.change or 0)
        )
        before, after = power.set_brightness(max(1, min(100, target)))
        return _changed("brightness", before, after, f"Brightness {before}% → {after}%")

    def battery_status(args: BatteryStatusArgs) -> dict[str, Any]:
        return power.battery()

    def system_status_(args: SystemStatusArgs) -> dict[str, Any]:
        folders = list(dict.fromkeys([Path.home(), *jail.roots]))
        return system_status(folders)

    def open_file(args: OpenFileArgs) -> dict[str, Any]:
        path = jail.resolve_entry(args.path)
        open_with_default(str(path))
        kind = "folder" if path.is_dir() else "file"
        return {"opened": jail.display(path), "kind": kind}

    def open_web_address(args: OpenWebAddressArgs) -> dict[str, Any]:
        url = check_web_address(args.url)
        open_with_default(url)
        return {"opened": url}

    def start_app(args: StartAppArgs) -> dict[str, Any]:
        app = find_app(args.name)
        files = [jail.resolve_entry(args.file)] if args.file else []
        launch(app, files)
        out: dict[str, Any] = {"started": app.name}
        if files:
            out["with_file"] = jail.display(files[0])
        return out

    def lock_screen_(args: LockScreenArgs) -> dict[str, Any]:
        return {"locked": True, "by": lock_screen()}

    read, local, rev = {Effect.READ}, {Effect.LOCAL_WRITE}, Tier.REVERSIBLE

    def said(arguments: Mapping[str, Any], result: Any) -> str:
        """What a change did, as its result says it ("Volume 60% → 40%")."""
        return str(result.get("message") or "") if isinstance(result, Mapping) else ""

    def state(read_now: Callable[[], Any], key: str) -> StateRule:
        def rule(arguments: Mapping[str, Any]) -> Mapping[str, Any] | None:
            return {key: read_now()}

        return rule

    return [
        make_tool(sound_status, effects=read, tier=Tier.READ),
        make_tool(
            set_volume,
            effects=local,
            tier=rev,
            done=said,
            inverse=_back("set_volume", "percent", "volume"),
            summary=lambda a: _level_summary("the volume", a),
            state=state(sound.volume, "volume"),
        ),
        make_tool(
            mute_sound,
            effects=local,
            tier=rev,
            done=said,
            inverse=_back("mute_sound", "mute", "muted"),
            summary=lambda a: (
                ("Mute the sound" if a.get("mute", True) else "Unmute the sound") + _until_words(a)
            ),
            state=state(sound.muted, "muted"),
        ),
        make_tool(
            choose_sound_output,
            effects=local,
            tier=rev,
            done=said,
            inverse=_back("choose_sound_output", "output", "output"),
            summary=lambda a: f"Play the sound on “{a.get('output')}”",
            state=state(sound.output_name, "output"),
        ),
        make_tool(
            set_do_not_disturb,
            effects=local,
            tier=rev,
            done=said,
            inverse=_back("set_do_not_disturb", "on", "on"),
            summary=lambda a: (
                f"Turn do not disturb {'on' if a.get('on') else 'off'}" + _until_words(a)
            ),
            state=state(desktop.do_not_disturb, "on"),
        ),
        make_tool(
            set_appearance,
            effects=local,
            tier=rev,
            done=said,
            inverse=_back("set_appearance", "mode", "mode"),
            summary=lambda a: f"Switch to {a.get('mode')} mode",
            state=state(desktop.appearance, "mode"),
        ),
        make_tool(
            set_brightness,
            effects=local,
            tier=rev,
            done=said,
            inverse=_back("set_brightness", "percent", "brightness"),
            summary=lambda a: _level_summary("the screen's brightness", a),
            state=state(power.brightness, "brightness"),
        ),
        make_tool(battery_status, effects=read, tier=Tier.READ, untrusted_output=False),
        make_tool(system_status_, name="system_status", effects=read, tier=Tier.READ),
        make_tool(
            open_file,
            effects=local,
            tier=rev,
            targets=("path",),
            inverse=_none("an opened file or folder is closed in the app that shows it"),
            summary=lambda a: f"Open “{a.get('path')}”",
        ),
        make_tool(
            open_web_address,
            effects=local,
            tier=rev,
            targets=("url",),
            sends=("url",),
            inverse=_none("a page opened in the browser is closed there"),
            summary=lambda a: f"Open the web page {a.get('url')} in your browser",
        ),
        make_tool(
            start_app,
            effects=local,
            tier=rev,
            targets=("name", "file"),
            inverse=_none("an app that was started is closed from its own window"),
            summary=lambda a: (
                f"Start {a.get('name')}" + (f" with “{a.get('file')}”" if a.get("file") else "")
            ),
        ),
        make_tool(
            lock_screen_,
            name="lock_screen",
            effects=local,
            tier=rev,
            inverse=_none("the screen is unlocked with your password"),
            summary=lambda a: "Lock the screen",
        ),
    ]


def _until_words(a: Mapping[str, Any]) -> str:
    until = str(a.get("until") or "").strip()
    return f" (until {until.removeprefix('for ').removeprefix('until ')})" if until else ""


def _until(alarms: AlarmService | None, text: str) -> datetime:
    """When a timed change is set back: "in an hour", "for 30 minutes", "15:00", "3pm"."""
    if alarms is None:
        raise ToolError("A change for a while needs the alarms, which are off in this profile.")
    now = alarms.now()
    words = " ".join(text.strip().split())
    lowered = words.lower()
    for prefix in ("for ", "until ", "till ", "til "):
        if lowered.startswith(prefix):
            words, lowered = words[len(prefix) :], lowered[len(prefix) :]
    if lowered.startswith("an ") or lowered.startswith("a "):
        words = "1 " + words.split(" ", 1)[1]
    at: datetime | None = None
    try:
        at = now + parse_duration(words)
    except ToolError:
        at = parse_when(words, now, alarms.tz).at
    if at <= now:
        raise ToolError(f"“{text}” is not in the future; say until when.")
    if at - now > timedelta(days=7):
        raise ToolError(f"“{text}” is more than a week away; a change for a while is shorter.")
    return at


def _changed(key: str, before: Any, after: Any, message: str) -> dict[str, Any]:
    out: dict[str, Any] = {"message": message, "before": before, "now": after}
    if before == after:
        out["message"] = message.split(" → ")[0] + " (it already was)"
    return out


def _back(tool: str, argument: str, key: str) -> InverseRule:
    """Undo sets the value back to what it was before; it expects what the change left."""

    def rule(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
        if not isinstance(result, Mapping) or "before" not in result:
            return "the change did not say what it replaced"
        if result["before"] == result.get("now"):
            return "nothing changed (it already was so)"
        return Inverse(tool, {argument: result["before"]}, expect={key: result.get("now")})

    return rule


def _none(why: str) -> InverseRule:
    def rule(arguments: Mapping[str, Any], result: Any) -> str:
        return why

    return rule


def _level_summary(what: str, a: Mapping[str, Any]) -> str:
    if a.get("percent") is not None:
        return f"Set {what} to {a.get('percent')}%"
    change = a.get("change")
    if not isinstance(change, int):
        return f"Change {what}"
    return f"Turn {what} {'up' if change > 0 else 'down'} by {abs(change)} points"
