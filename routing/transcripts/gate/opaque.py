"""Opaque blobs (the training gate only): encoded binary that is not text and looks random --
byte entropy near a random sample's of the same length and characters spread evenly over the
encoding's alphabet (:func:`opaque_blob`); identifiers (UUIDs, hex digests, labelled hashes)
are not blobs (:func:`identifier_list`). Thresholds calibrated in ``bench/gate_calibration.py``."""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from collections import Counter

from .decoding import PREFIX_CHARS, bytes_text

# Identifiers that end a join: UUIDs, hex digests (abbreviated git SHA, MD5, SHA-1, SHA-256,
# SHA-512) and labelled hashes (sha512-..., sha256=...).
IDENTIFIER_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{7,12}|[0-9a-fA-F]{32}|[0-9a-fA-F]{40}|[0-9a-fA-F]{64}|[0-9a-fA-F]{128}"
    r"|(?:sha(?:1|224|256|384|512)|md5)[-=:][A-Za-z0-9+/_=\-]+",
    re.I,
)


CHAR_CLASSES = str.maketrans(
    {
        **dict.fromkeys("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "U"),
        **dict.fromkeys("abcdefghijklmnopqrstuvwxyz", "L"),
        **dict.fromkeys("0123456789", "D"),
    }
)


@functools.lru_cache(maxsize=4096)
def random_entropy(n: int, k: int) -> float:
    """Expected Shannon entropy (bits per character, of the character counts) of ``n``
    characters drawn uniformly from ``k``: exact (a sum over the binomial distribution of one
    character's count) up to 4,096 characters, then the Miller-Madow approximation."""
    if n > 4096:
        return math.log2(k) - (k - 1) / (2 * n * math.log(2))
    p = 1.0 / k
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    total = 0.0
    for count in range(1, n + 1):
        log_pmf = (
            log_n - math.lgamma(count + 1) - math.lgamma(n - count + 1) + count * log_p + (n - count) * log_q
        )
        if log_pmf < -40 and count > n * p:
            break
        total += math.exp(log_pmf) * (count / n) * math.log2(count / n)
    return -k * total


def entropy(text: str) -> float:
    """Shannon entropy of ``text``'s character counts, bits per character."""
    n = len(text)
    return math.log2(n) - sum(c * math.log2(c) for c in Counter(text).values()) / n


#: Fewest bytes an encoded run must decode to before it can be an opaque blob (calibrated in
#: ``bench/gate_calibration.py``: the shortest Anthropic signatures seen are longer; SHA-512
#: digests, 64 bytes, and HS256/ES256 JWT signatures, 32/64 bytes, are shorter).
MIN_OPAQUE_BYTES = 96
#: Most decoded bytes of one run whose statistics are computed (a prefix: bounded work per run).
OPAQUE_SAMPLE_BYTES = 4096
#: How far (bits per byte) below a random string's expected byte entropy, at the same length
#: (:func:`random_entropy`, which is biased low for short samples), an opaque blob may be.
#: Lenient: it only excludes plainly structured binary (the characters' test below is the
#: sharp one); a 96-byte blob repeating a 32-byte digest, the fake upstream's canary, is ~1.3
#: bits below.
OPAQUE_BYTE_MARGIN = 2.0
#: How many standard deviations of a random string's character entropy the encoded run may be
#: below its expected value (excludes runs of words, digits, DNA, URLs, ...). The standard
#: deviation is ``sqrt((k - 1) / 2) / (n ln 2)`` bits for ``n`` characters of a ``k``-letter
#: alphabet (checked by simulation: 0.067 for 128 base64 characters, 0.021 for 192 hex ones).
OPAQUE_CHAR_SIGMAS = 6.0
#: ... but at least this many bits per character (a long blob with a short structured header,
#: a PNG's or a protobuf's, sits a little below; runs of words, digits or DNA sit 0.5+ below).
OPAQUE_CHAR_MIN_MARGIN = 0.15
#: The alphabet size of each encoding and the run length (characters) of MIN_OPAQUE_BYTES.
_ALPHABET_SIZES = {"base64": 64, "hex": 16, "base32": 32, "base85": 85}
MIN_OPAQUE_CHARS = {
    "base64": -(-MIN_OPAQUE_BYTES * 4 // 3),
    "hex": 2 * MIN_OPAQUE_BYTES,
    "base32": -(-MIN_OPAQUE_BYTES * 8 // 5),
    "base85": -(-MIN_OPAQUE_BYTES * 5 // 4),
}
#: Shortest token that counts as an identifier in a list (:func:`identifier_list`).
MIN_IDENTIFIER = 24


def _byte_entropy(raw: bytes) -> float:
    """Shannon entropy of ``raw``'s byte counts, bits per byte."""
    n = len(raw)
    return math.log2(n) - sum(c * math.log2(c) for c in Counter(raw).values()) / n


def opaque_blob(raw: bytes, chars: str, alphabet: int) -> bool:
    """Whether decoded bytes are an opaque blob: binary that cannot be scanned and looks random.

    ``raw``: the decoded bytes (at most :data:`OPAQUE_SAMPLE_BYTES` are looked at); ``chars``:
    the encoded characters they came from (the same prefix; padding and line breaks removed);
    ``alphabet``: the encoding's alphabet size (64 base64, 16 hex, 32 base32, 85 base85).
    True when all of: at least :data:`MIN_OPAQUE_BYTES` bytes; not text (:func:`bytes_text`:
    UTF-8, UTF-16/32, compressed text -- those the detector decodes and scans instead); the
    byte entropy (bits per byte) at least :func:`random_entropy` ``(n, 256)`` minus
    :data:`OPAQUE_BYTE_MARGIN` (6.24 expected at 96 bytes, 7.94 at 4,096); and the characters'
    entropy at least ``random_entropy(len(chars), alphabet)`` minus
    :data:`OPAQUE_CHAR_SIGMAS` standard deviations (0.40 bits for 128 base64 characters, 0.12
    for 192 hex ones), or :data:`OPAQUE_CHAR_MIN_MARGIN` if more; and the entropy of the
    differences between successive bytes as high as the bytes' own must be (not a counter).
    Linear in the sample's length."""
    raw, chars = raw[:OPAQUE_SAMPLE_BYTES], chars[: OPAQUE_SAMPLE_BYTES * 2]
    n = len(chars)
    if len(raw) < MIN_OPAQUE_BYTES or not n:
        return False
    if _byte_entropy(raw) < random_entropy(len(raw), 256) - OPAQUE_BYTE_MARGIN:
        return False
    sigma = math.sqrt((alphabet - 1) / 2) / (n * math.log(2))
    margin = max(OPAQUE_CHAR_SIGMAS * sigma, OPAQUE_CHAR_MIN_MARGIN)
    if entropy(chars) < random_entropy(n, alphabet) - margin:
        return False
    if bytes_text(raw) is not None:
        return False
    # Counts cannot see order: a table of counting numbers (0x10, 0x11, ...) has every byte value
    # once. Random bytes differ from one to the next by random amounts too.
    deltas = bytes((b - a) & 0xFF for a, b in zip(raw, raw[1:], strict=False))
    return _byte_entropy(deltas) >= random_entropy(len(deltas), 256) - OPAQUE_BYTE_MARGIN


def opaque_run(body: str, encoding: str) -> bool:
    """Whether a run (base64 of either alphabet, hex or base32; padding stripped) decodes to an
    opaque blob (:func:`opaque_blob`); only a prefix of :data:`OPAQUE_SAMPLE_BYTES` is decoded."""
    if encoding == "base64":
        chars = body[: OPAQUE_SAMPLE_BYTES // 3 * 4].replace("-", "+").replace("_", "/")
        chars = chars[: len(chars) - 1] if len(chars) % 4 == 1 else chars
        try:
            raw = base64.b64decode(chars + "=" * (-len(chars) % 4), validate=True)
        except (binascii.Error, ValueError):
            return False
    elif encoding == "hex":
        chars = body[: 2 * OPAQUE_SAMPLE_BYTES]
        chars = chars[: len(chars) - len(chars) % 2]
        raw = bytes.fromhex(chars)
    else:  # base32 (pure-Python decoder: a shorter prefix)
        chars = body[:PREFIX_CHARS].upper()
        chars = chars[: len(chars) - 1] if len(chars) % 8 in (1, 3, 6) else chars
        try:
            raw = base64.b32decode(chars + "=" * (-len(chars) % 8))
        except (binascii.Error, ValueError):
            return False
    return opaque_blob(raw, chars, _ALPHABET_SIZES[encoding])


def opaque_base85(run: str, decode) -> bool:
    """Whether a base85 run (decoded by ``decode``, up to 4 characters glued in front; a prefix of
    :data:`PREFIX_CHARS` characters) is an opaque blob (:func:`opaque_blob`)."""
    for offset in range(5):
        chars = run[offset : offset + PREFIX_CHARS]
        chars = chars[: len(chars) - len(chars) % 5]
        try:
            raw = decode(chars)
        except (ValueError, binascii.Error):
            continue
        return opaque_blob(raw, chars, _ALPHABET_SIZES["base85"])
    return False


def identifier_list(tokens: list[str]) -> bool:
    """Whether every token is an identifier of at least :data:`MIN_IDENTIFIER` characters (a
    UUID, a hex digest, a labelled hash: :data:`IDENTIFIER_RE`): a list of SHA-256 digests or
    UUIDs, one a line, is random-looking but is no blob."""
    return all(len(t) >= MIN_IDENTIFIER and IDENTIFIER_RE.fullmatch(t) for t in tokens)
