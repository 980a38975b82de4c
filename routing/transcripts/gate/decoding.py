"""The bytes behind an encoding, as text when they are text: base64 (aligned or shifted), hex,
base32 and base85 runs decoded, UTF-8/16/32 read, gzip/zlib/bzip2/xz/lzma inflated (bounded by
:data:`MAX_INFLATED_BYTES`; past it :data:`INFLATE_LIMIT`). Fernet tokens are recognised by
their version byte (https://github.com/fernet/spec/blob/master/Spec.md)."""

from __future__ import annotations

import base64
import binascii
import bz2
import lzma
import re
import zlib
from typing import Any

from .markers import FERNET_TOKEN

#: Most bytes inflated from one compressed run of bytes (gzip, zlib, bzip2, xz, lzma; all its
#: concatenated streams together); a larger one stays unread (and opaque).
MAX_INFLATED_BYTES = 1024 * 1024


_LINE_BREAKS = str.maketrans("", "", "\r\n\t")
_ASCII_UNPRINTABLE_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _text_or_none(decoded: str) -> str | None:
    """``decoded`` when more than 90% of its characters are printable (or line breaks, tabs)."""
    if not decoded:
        return None
    if decoded.isascii():
        unprintable = len(_ASCII_UNPRINTABLE_RE.findall(decoded))
    elif decoded.translate(_LINE_BREAKS).isprintable():
        unprintable = 0
    else:
        unprintable = sum(1 for ch in decoded if not (ch.isprintable() or ch in "\r\n\t"))
    return decoded if unprintable < 0.1 * len(decoded) else None


def bytes_text(raw: bytes, *, inflate: bool = True) -> str | None:
    """The text behind decoded bytes, or None when they are binary: UTF-8; UTF-16 or UTF-32
    (a byte-order mark, or NUL bytes in the high half of most code units); gzip-, zlib-,
    bzip2-, xz- or lzma-compressed text (at most :data:`MAX_INFLATED_BYTES` inflated:
    :func:`_inflated`)."""
    try:
        text = _text_or_none(raw.decode("utf-8"))
    except UnicodeDecodeError:
        text = None
    if text is not None:
        return text
    if len(raw) >= 4 and (raw.count(0) * 3 >= len(raw) or raw[:2] in (b"\xff\xfe", b"\xfe\xff")):
        for codec in _wide_codecs(raw):
            try:
                text = _text_or_none(raw.decode(codec))
            except UnicodeDecodeError:
                continue
            if text is not None:
                return text
    if inflate and (inflated := _inflated(raw)) is not None:
        return INFLATE_LIMIT if inflated is _TOO_LARGE else bytes_text(inflated, inflate=False)
    return None


def _wide_codecs(raw: bytes) -> tuple[str, ...]:
    """UTF-16/32 codecs worth trying on ``raw``, by its byte-order mark or where its NULs are."""
    if raw[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        return ("utf-32",)
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return ("utf-16",)
    if raw[1::4].count(0) + raw[2::4].count(0) + raw[3::4].count(0) > len(raw) // 2:
        return ("utf-32-le", "utf-16-le")
    if raw[0::4].count(0) + raw[1::4].count(0) + raw[2::4].count(0) > len(raw) // 2:
        return ("utf-32-be", "utf-16-be")
    return ("utf-16-le",) if raw[1::2].count(0) >= raw[0::2].count(0) else ("utf-16-be",)


#: Most compressed streams (gzip members, bz2 or xz streams) read one after another from one
#: run of bytes; the inflated output of all of them together is bounded by MAX_INFLATED_BYTES.
MAX_COMPRESSED_STREAMS = 64


def _decompressor(raw: bytes) -> Any:
    """A fresh decompressor for the compressed stream ``raw`` starts with (gzip, zlib, bzip2, xz,
    legacy ``.lzma``: by their headers), or None."""
    if raw[:2] == b"\x1f\x8b" or (len(raw) > 1 and raw[0] & 0x0F == 8 and int.from_bytes(raw[:2]) % 31 == 0):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # either header
    if raw[:3] == b"BZh" and raw[3:4] in b"123456789" and raw[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return bz2.BZ2Decompressor()
    if raw[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMADecompressor(lzma.FORMAT_XZ)
    if len(raw) >= 13 and raw[0] < 225:
        # legacy .lzma (lzma.FORMAT_ALONE): a properties byte, then a dictionary size of 2**n or
        # 3 * 2**n bytes (as encoders write it; one random 4-byte value in ~10**8 is one)
        size = int.from_bytes(raw[1:5], "little")
        odd = size // 3 if size % 3 == 0 else size
        if 4096 <= size <= 1 << 30 and odd & (odd - 1) == 0:
            return lzma.LZMADecompressor(lzma.FORMAT_ALONE)
    return None


def _inflate_stream(stream: Any, raw: bytes, room: int) -> Any:
    """At most ``room`` bytes inflated from the start of ``raw``, whether the stream ended, and
    the bytes after its end; None when it is corrupt, :data:`_TOO_LARGE` when it inflates to
    more than ``room`` bytes."""
    try:
        out = stream.decompress(raw, room)
    except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError):
        return None
    if isinstance(stream, bz2.BZ2Decompressor | lzma.LZMADecompressor):
        more = not stream.eof and not stream.needs_input  # output held back past ``room``
    else:
        more = bool(stream.unconsumed_tail) or (not stream.eof and len(out) >= room)
    if more or len(out) > room:
        return _TOO_LARGE
    return out, stream.eof, stream.unused_data if stream.eof else b""


#: What :func:`bytes_text` reads compressed bytes that inflate past :data:`MAX_INFLATED_BYTES` as
#: (compared by identity): scanning it is an ``inflate_limit_exceeded`` finding -- refused, never
#: let through unscanned (a secret behind 64 MB of zeros compresses to a few hundred bytes).
INFLATE_LIMIT = "<inflate limit exceeded>"
#: :func:`_inflated`'s answer for such bytes (a unique object, compared by identity).
_TOO_LARGE: Any = object()


def _inflated(raw: bytes) -> Any:
    """The inflated bytes of a gzip, zlib, bzip2, xz or legacy ``.lzma`` stream (possibly
    truncated), or None when not compressed or corrupt, or :data:`_TOO_LARGE` (by identity)
    when inflating to more than :data:`MAX_INFLATED_BYTES` (whatever the format, every
    decompressor is called with that output limit, so a decompression bomb costs at most that
    much memory; it is refused, not read).
    Compressed streams following it (concatenated gzip members, bzip2 or xz streams; at most
    :data:`MAX_COMPRESSED_STREAMS`, within the same output limit in all) are inflated after
    it, as ``gunzip`` does; other bytes after it are kept as they are (read with the text)."""
    out = b""
    rest = raw
    for count in range(MAX_COMPRESSED_STREAMS + 1):
        stream = _decompressor(rest) if count < MAX_COMPRESSED_STREAMS else None
        inflated = None if stream is None else _inflate_stream(stream, rest, MAX_INFLATED_BYTES - len(out))
        if inflated is _TOO_LARGE:
            return _TOO_LARGE
        if inflated is None:
            if count == 0:
                return None
            if len(out) + len(rest) > MAX_INFLATED_BYTES:
                return _TOO_LARGE
            return out + rest  # trailing bytes that are no further stream: read as they are
        chunk, ended, rest = inflated
        out += chunk
        rest = rest.lstrip(b"\0") if ended else rest
        if not ended or not rest:  # truncated; or the end (xz pads streams with NULs)
            return out
        if len(out) >= MAX_INFLATED_BYTES:
            return _TOO_LARGE
    return None


def _is_fernet_token(raw: bytes, *, shifted: bool = False) -> bool:
    """Whether bytes have a Fernet token's shape (spec above): version 0x80, 8-byte timestamp,
    16-byte IV, whole 16-byte ciphertext blocks, 32-byte HMAC; ``shifted`` adds the zero high
    timestamp bytes."""
    if len(raw) < 73 or raw[0] != 0x80 or (len(raw) - 57) % 16:
        return False
    return not shifted or raw[1:4] == b"\0\0\0"


def decoded_base64(run: str) -> str | None:
    """The text behind a base64 run, or None if it is not base64 of text.

    Both alphabets (standard and URL-safe) are accepted, and the run may start up to 3
    characters early (base64 glued to a preceding word). The bytes may be UTF-8, UTF-16/32 or
    compressed text (:func:`bytes_text`). A raw Fernet token (version byte 0x80, >= 73 bytes,
    16-byte blocks) is reported as :data:`FERNET_TOKEN`. At a shifted start its timestamp must
    also be below 2**40 s (its three high bytes zero, as every real token's are): one random
    blob in 256 decodes to a 0x80 byte at a shift, and a clean image must not be rejected for
    that; the extra rule leaves one in 2**40.
    """
    for offset in range(4):
        found = _decode_aligned(run[offset:], shifted=offset > 0)
        if found is not None:
            return found
    return None


def _decode_aligned(run: str, *, shifted: bool) -> str | None:
    body = run.rstrip("=").replace("-", "+").replace("_", "/")
    body = body[: len(body) - len(body) % 4] if len(body) % 4 == 1 else body
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    if _is_fernet_token(raw, shifted=shifted):
        return FERNET_TOKEN
    return bytes_text(raw)


def decoded_hex(run: str) -> str | None:
    """The text behind a hex run (even length, either case; :func:`bytes_text`), or None; a
    raw Fernet token is reported as :data:`FERNET_TOKEN`."""
    raw = bytes.fromhex(run)
    if _is_fernet_token(raw):
        return FERNET_TOKEN
    return bytes_text(raw)


BASE32_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
#: How many characters of a base32/base85 run are decoded first: when they are not text, the
#: rest is not decoded (those decoders are pure Python, and binary is judged as such anyway).
PREFIX_CHARS = 1600


def decoded_base32(run: str) -> str | None:
    """The text behind a base32 run (RFC 4648, either case, padding optional, up to 7
    characters glued in front), or None."""
    body = run.rstrip("=").upper()
    for offset in range(8):
        text = _base32_text(body[offset : offset + PREFIX_CHARS])
        if text is not None:
            return text if len(body) - offset <= PREFIX_CHARS else _base32_text(body[offset:])
    return None


def _base32_text(body: str) -> str | None:
    body = body[: len(body) - (1 if len(body) % 8 in (1, 3, 6) else 0)]
    if len(body) < 8:
        return None
    try:
        return bytes_text(base64.b32decode(body + "=" * (-len(body) % 8)))
    except (binascii.Error, ValueError):
        return None


_Z85_TO_BASE85 = str.maketrans(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#",
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~",
)
#: The base85 alphabets: Adobe ascii85 (``!``..``u``; ``base64.a85encode``), RFC 1924 /
#: git / ``base64.b85encode``, and ZeroMQ Z85; with each, its decoder and the shares of
#: (upper-case, lower-case, digit, other) characters a random string in it shows.
BASE85_ALPHABETS = (
    (re.compile(r"(?<![!-u])[!-u]{100,}"), base64.a85decode, (26 / 85, 21 / 85, 10 / 85, 28 / 85)),
    (
        re.compile(r"(?<![0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~])[0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]{100,}"),
        base64.b85decode,
        (26 / 85, 26 / 85, 10 / 85, 23 / 85),
    ),
    (
        re.compile(r"(?<![0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#])[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{100,}"),
        lambda text: base64.b85decode(text.translate(_Z85_TO_BASE85)),
        (26 / 85, 26 / 85, 10 / 85, 23 / 85),
    ),
)


def decoded_base85(run: str, decode) -> str | None:
    """The text behind a base85 run (by ``decode``; up to 4 characters glued in front), or None."""
    for offset in range(5):
        body = run[offset:]
        for text in (body[:PREFIX_CHARS], body) if len(body) > PREFIX_CHARS else (body,):
            try:
                found = bytes_text(decode(text[: len(text) - len(text) % 5]))
            except (ValueError, binascii.Error):
                found = None
            if found is None:
                break
        else:
            return found
    return None
