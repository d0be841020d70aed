"""Make the app's binary assets from their sources: icon PNGs, ICO, ICNS and the alarm sound.

    QT_QPA_PLATFORM=offscreen python packaging/make_assets.py

Sources: botpsy_desktop/assets/icons/*.svg (hand-written). Outputs, committed so that builds and
installs need no image tools:

- botpsy_desktop/assets/icons/botpsy-N.png at the freedesktop sizes (the window, the .deb's
  hicolor theme), tray-light-N.png / tray-dark-N.png (a dark glyph for light panels and a light
  one for dark panels, each with a contrasting rim), tray-template-N.png (macOS menu bar);
- packaging/icons/botpsy.ico (Windows: 16 to 256 px) and botpsy.icns (macOS: 16 to 1024 px),
  both holding PNG images, which every supported Windows and macOS reads;
- botpsy_desktop/assets/sounds/alarm.wav: a three-note bell chime, synthesised here (CC0).

The ICO/ICNS readers below are what the tests use to check the committed files.
"""

from __future__ import annotations

import argparse
import io
import struct
import sys
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ICONS = ROOT / "botpsy_desktop" / "assets" / "icons"
SOUNDS = ROOT / "botpsy_desktop" / "assets" / "sounds"
PACKAGING_ICONS = ROOT / "packaging" / "icons"

APP_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
"""The freedesktop hicolor sizes the window and the .deb use."""
TRAY_SIZES = (16, 22, 24, 32, 48, 64)
TEMPLATE_SIZES = (18, 36)
"""macOS menu-bar icons: 18 pt, at 1x and 2x."""
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_TYPES: dict[bytes, int] = {
    b"icp4": 16,
    b"icp5": 32,
    b"icp6": 64,
    b"ic07": 128,
    b"ic08": 256,
    b"ic09": 512,
    b"ic10": 1024,  # 512@2x
    b"ic11": 32,  # 16@2x
    b"ic12": 64,  # 32@2x
    b"ic13": 256,  # 128@2x
    b"ic14": 512,  # 256@2x
}

SAMPLE_RATE = 44100
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- images -------------------------------------------------------------------------------------
def render_svg(svg: Path, size: int) -> bytes:
    """The SVG drawn at ``size`` x ``size`` pixels, as PNG bytes (Qt's SVG renderer)."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
    from PySide6.QtGui import QImage, QImageWriter, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG file")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QImageWriter(buffer, QByteArray(b"png"))
    if not writer.write(image.convertToFormat(QImage.Format.Format_ARGB32)):
        raise ValueError(f"cannot write PNG: {writer.errorString()}")
    buffer.close()
    return bytes(data.data())


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    if not data.startswith(PNG_MAGIC) or data[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """A Windows .ico holding one PNG image per size (Vista and later read PNG entries)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = len(header) + 16 * len(sizes)
    entries, payload = b"", b""
    for size in sizes:
        data = pngs[size]
        dim = 0 if size >= 256 else size  # 0 means 256
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(data), offset)
        payload += data
        offset += len(data)
    return header + entries + payload


def read_ico(data: bytes) -> dict[int, bytes]:
    """The images of an .ico by size (PNG entries), checking its directory."""
    reserved, kind, count = struct.unpack_from("<HHH", data, 0)
    if reserved != 0 or kind != 1 or count == 0:
        raise ValueError("not an .ico file")
    images: dict[int, bytes] = {}
    for i in range(count):
        w, h, _, _, _, _, length, offset = struct.unpack_from("<BBBBHHII", data, 6 + 16 * i)
        image = data[offset : offset + length]
        if len(image) != length:
            raise ValueError(f"ico entry {i} runs past the end of the file")
        size = w or 256
        if png_size(image) != (size, h or 256):
            raise ValueError(f"ico entry {i} says {size} px but holds another size")
        images[size] = image
    return images


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    """A macOS .icns with every PNG-capable element type, from images keyed by pixel size."""
    body = b""
    for kind, size in ICNS_TYPES.items():
        data = pngs[size]
        body += kind + struct.pack(">I", 8 + len(data)) + data
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def read_icns(data: bytes) -> dict[bytes, bytes]:
    """The elements of an .icns by type, checking the lengths add up."""
    if data[:4] != b"icns" or struct.unpack(">I", data[4:8])[0] != len(data):
        raise ValueError("not an .icns file (bad magic or length)")
    elements: dict[bytes, bytes] = {}
    pos = 8
    while pos < len(data):
        kind = data[pos : pos + 4]
        (length,) = struct.unpack(">I", data[pos + 4 : pos + 8])
        if length < 8 or pos + length > len(data):
            raise ValueError(f"icns element {kind!r} has a bad length")
        elements[kind] = data[pos + 8 : pos + length]
        pos += length
    return elements


# -- sound --------------------------------------------------------------------------------------
def alarm_samples() -> np.ndarray:
    """Three bell strikes rising C6-E6-G6, then a pause before the sound repeats (int16)."""
    notes = ((1046.50, 0.00), (1318.51, 0.22), (1567.98, 0.44))
    # partials of a small bell: (frequency ratio, level, decay time constant in seconds)
    partials = ((1.0, 1.0, 0.55), (2.0, 0.45, 0.30), (3.01, 0.22, 0.16), (4.17, 0.12, 0.09))
    length_s = 2.4
    t = np.arange(int(SAMPLE_RATE * length_s)) / SAMPLE_RATE
    out = np.zeros_like(t)
    for freq, start in notes:
        local = t - start
        on = local >= 0
        attack = np.clip(local / 0.004, 0.0, 1.0)  # 4 ms attack: no click
        for ratio, level, decay in partials:
            wave_ = np.sin(2 * np.pi * freq * ratio * local) * level * np.exp(-local / decay)
            out += np.where(on, wave_ * attack, 0.0)
    fade = np.clip((length_s - 0.1 - t) / 0.1, 0.0, 1.0)  # silent 0.1 s: loops join cleanly
    out *= fade
    out *= 0.8 / np.max(np.abs(out))
    return np.round(out * 32767).astype("<i2")


def wav_bytes(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(samples.tobytes())
    return buffer.getvalue()


# -- main ---------------------------------------------------------------------------------------
def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_bytes() == data:
        return
    path.write_bytes(data)
    print(f"wrote {path.relative_to(ROOT)} ({len(data):,} bytes)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.parse_args(argv)
    from PySide6.QtGui import QGuiApplication

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    app_svg = ICONS / "botpsy.svg"
    app_pngs = {size: render_svg(app_svg, size) for size in {*APP_SIZES, *ICO_SIZES, 1024}}
    for size in APP_SIZES:
        write(ICONS / f"botpsy-{size}.png", app_pngs[size])
    for variant in ("light", "dark"):
        svg = ICONS / f"tray-{variant}.svg"
        for size in TRAY_SIZES:
            write(ICONS / f"tray-{variant}-{size}.png", render_svg(svg, size))
    for size in TEMPLATE_SIZES:
        write(ICONS / f"tray-template-{size}.png", render_svg(ICONS / "tray-template.svg", size))
    write(PACKAGING_ICONS / "botpsy.ico", ico_bytes({s: app_pngs[s] for s in ICO_SIZES}))
    write(PACKAGING_ICONS / "botpsy.icns", icns_bytes(app_pngs))
    write(SOUNDS / "alarm.wav", wav_bytes(alarm_samples()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
