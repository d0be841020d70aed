"""Battery, power, screen brightness, disk space, network and what uses the processor.

On Linux, battery, power supply and backlight are read where the kernel puts them
(``/sys/class/power_supply``, ``/sys/class/backlight``): the same files UPower and the desktop's
brightness slider read, with no daemon needed (the root is a setting, so tests point it at a
folder laid out the same way). Brightness is written through systemd-logind's
``Session.SetBrightness`` over D-Bus (jeepney), which lets the person's own session change it
without root, or straight to the file where the file is writable. Disk space, network and
processes come from psutil (the cross-platform library made for it); elsewhere than Linux the
battery comes from psutil too, and brightness is not supported yet.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from botpsy_desktop.core.errors import ToolError


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text)
    except ValueError:
        return None


class Power:
    """Battery and brightness under ``sysfs`` (``/sys`` on a real Linux)."""

    def __init__(self, sysfs: Path = Path("/sys")) -> None:
        self.sysfs = sysfs

    # --- battery and power supply -----------------------------------------------------------

    def battery(self) -> dict[str, Any]:
        supplies = self.sysfs / "class" / "power_supply"
        batteries: list[dict[str, Any]] = []
        plugged: bool | None = None
        if sys.platform.startswith("linux") and supplies.is_dir():
            for entry in sorted(supplies.iterdir()):
                kind = _read(entry / "type")
                if kind == "Battery" and _read(entry / "scope") != "Device":
                    capacity = _int(entry / "capacity")
                    status = _read(entry / "status") or "Unknown"
                    battery: dict[str, Any] = {"name": entry.name, "percent": capacity}
                    battery["state"] = status.lower()
                    left = self._time_left(entry, status)
                    if left is not None:
                        battery[
                            "minutes_left" if status == "Discharging" else "minutes_to_full"
                        ] = left
                    batteries.append(battery)
                elif kind in ("Mains", "USB", "USB_C", "USB_PD") and _int(entry / "online") == 1:
                    plugged = True
                elif kind in ("Mains",) and plugged is None:
                    plugged = False
        elif not sys.platform.startswith("linux"):
            import psutil

            found = psutil.sensors_battery()
            if found is not None:
                batteries.append({"name": "battery", "percent": round(found.percent)})
                plugged = bool(found.power_plugged)
        if not batteries:
            return {
                "battery": None,
                "plugged_in": True if plugged is None else plugged,
                "note": "This computer has no battery: it runs on mains power.",
            }
        if plugged is None:
            plugged = not any(b["state"] == "discharging" for b in batteries)
        return {"batteries": batteries, "plugged_in": plugged}

    @staticmethod
    def _time_left(entry: Path, status: str) -> int | None:
        """Minutes to empty or to full, from energy (µWh) and power (µW), or charge and current."""
        now, full, rate = (
            _int(entry / "energy_now"),
            _int(entry / "energy_full"),
            _int(entry / "power_now"),
        )
        if now is None:
            now, full, rate = (
                _int(entry / "charge_now"),
                _int(entry / "charge_full"),
                _int(entry / "current_now"),
            )
        if not now or not rate or rate <= 0:
            return None
        if status == "Discharging":
            return round(now / rate * 60)
        if status == "Charging" and full:
            return round(max(full - now, 0) / rate * 60)
        return None

    # --- brightness ---------------------------------------------------------------------------

    def _backlight(self) -> Path:
        folder = self.sysfs / "class" / "backlight"
        found = sorted(folder.iterdir()) if folder.is_dir() else []
        if not sys.platform.startswith("linux") or not found:
            raise ToolError(
                "This screen's brightness cannot be changed from here (no backlight: an "
                "external monitor, a virtual machine, or not Linux)."
            )
        # a firmware or platform interface drives the panel better than a raw one
        order = {"firmware": 0, "platform": 1, "raw": 2}
        return min(found, key=lambda p: (order.get(_read(p / "type"), 3), p.name))

    def brightness(self) -> int:
        device = self._backlight()
        level, top = _int(device / "brightness"), _int(device / "max_brightness")
        if level is None or not top:
            raise ToolError(f"The backlight {device.name} does not report its brightness.")
        return round(level * 100 / top)

    def set_brightness(self, percent: int) -> tuple[int, int]:
        """Set the screen's brightness (1-100: never fully dark); (before, after) in percent."""
        device = self._backlight()
        before = self.brightness()
        top = _int(device / "max_brightness") or 1
        level = max(1, round(max(1, min(100, percent)) * top / 100))
        try:
            (device / "brightness").write_text(str(level), encoding="ascii")
        except OSError:
            _logind_brightness(device.name, level)
        return before, self.brightness()


def _logind_brightness(device: str, level: int) -> None:
    """Ask systemd-logind to set the backlight (allowed to the active session without root)."""
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
    except ImportError as exc:
        raise ToolError("Brightness needs D-Bus (jeepney), which is missing.") from exc
    session = DBusAddress(
        "/org/freedesktop/login1/session/auto",
        bus_name="org.freedesktop.login1",
        interface="org.freedesktop.login1.Session",
    )
    try:
        with open_dbus_connection(bus="SYSTEM") as conn:
            reply = conn.send_and_get_reply(
                new_method_call(session, "SetBrightness", "ssu", ("backlight", device, level)),
                timeout=5,
            )
    except Exception as exc:  # no system bus, no logind
        raise ToolError(f"The brightness could not be set: {exc}") from exc
    if reply.header.message_type.name == "error":
        raise ToolError(f"The system refused to set the brightness: {reply.body}")


def system_status(folders: Sequence[Path], sample_s: float = 0.5) -> dict[str, Any]:
    """Disk space of ``folders`` (each disk once), network links and addresses, memory, and
    the processes using the processor most over ``sample_s``."""
    import psutil

    disks: list[dict[str, Any]] = []
    seen: set[int] = set()
    for folder in folders:
        try:
            device = folder.stat().st_dev
            usage = shutil.disk_usage(folder)
        except OSError:
            continue
        if device in seen:
            continue
        seen.add(device)
        disks.append(
            {
                "folder": str(folder),
                "free_gb": round(usage.free / 1e9, 1),
                "total_gb": round(usage.total / 1e9, 1),
                "used_percent": round(usage.used * 100 / usage.total) if usage.total else 0,
            }
        )
    stats, addresses = psutil.net_if_stats(), psutil.net_if_addrs()
    links = []
    for name, stat in sorted(stats.items()):
        if name == "lo" or name.startswith("lo"):
            continue
        ips = [
            a.address
            for a in addresses.get(name, [])
            if a.family.name in ("AF_INET", "AF_INET6") and not a.address.startswith("fe80")
        ]
        links.append({"name": name, "up": bool(stat.isup), "addresses": ips[:4]})
    processes = list(psutil.process_iter(["name", "pid"]))
    for p in processes:
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)
    psutil.cpu_percent(None)
    time.sleep(sample_s)
    busy: list[tuple[float, str, int]] = []
    for p in processes:
        try:
            busy.append((p.cpu_percent(None), str(p.info.get("name") or "?"), int(p.pid)))
        except psutil.Error:
            continue
    busy.sort(reverse=True)
    memory = psutil.virtual_memory()
    return {
        "cpu_percent": psutil.cpu_percent(None),
        "cpu_cores": psutil.cpu_count() or 1,
        "busiest": [
            {"process": name[:60], "pid": pid, "cpu_percent": round(cpu, 1)}
            for cpu, name, pid in busy[:5]
        ],
        "memory_used_percent": round(memory.percent),
        "memory_available_gb": round(memory.available / 1e9, 1),
        "disks": disks,
        "network": {
            "online": any(link["up"] and link["addresses"] for link in links),
            "links": links,
        },
    }
