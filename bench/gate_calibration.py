"""Calibration of the training gate's opaque-blob rule (``routing/transcripts/gate/``).

Prints three tables (not a timed test; run ``python bench/gate_calibration.py [--trials N]``):

* detection -- random bytes of 96 … 4,096 bytes encoded as base64, base64url (unpadded),
  base64 wrapped at 76, hex, base32, base85 (RFC 1924) and ascii85, each put bare (no marker
  word) in a native record's message content, alone and inside a sentence; plus the fake
  upstream's own Anthropic ``signature`` / ``redacted_thinking`` ``data`` canaries
  (``FakeUpstreams.issue_blob``) and 61-95-byte blobs (below :data:`MIN_OPAQUE_BYTES`: let
  through by design). Rate of records the gate refuses, per encoding and length.
* false positives -- legitimate training texts that must pass (prose, code, minified JS, JSON,
  URLs with query strings, UUIDs and lists of them, SHA-1/SHA-256/SHA-512 digests and lists of
  them, git ids and logs, HS256/ES256 JWTs, base64/hex/base32 of text, markdown, long numbers,
  DNA and protein sequences, npm integrity hashes, hex dumps of text), and the inputs refused
  *by decision* (an opaque binary is refused even when harmless: a base64 PNG icon, an SSH
  public key, a PEM certificate, an RS256 JWT, a V4 signed URL, a long random API key).
* timing -- ``gate_check`` of a typical 4 KB native record with and without the rule.
* ``--scan DIR ...`` -- every source/doc file under the directories (``.py .md .rst .txt .json
  .js .html .cfg .toml .yaml .yml .css``, at most 400 KB each) as one message: which the rule
  refuses. On a virtualenv's site-packages (15,113 files, 150 MB: Django, pandas, numpy, pip,
  ...) one file is refused: ``pandas/tests/util/test_hashing.py``, whose test strings are
  400-character random alphanumerics (random data, refused by decision like an API key).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import string
import struct
import sys
import time
import uuid
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing.simulated import FakeUpstreams  # noqa: E402
from routing.transcripts import gate  # noqa: E402
from routing.transcripts.gate import MIN_OPAQUE_BYTES, find_encrypted_reasoning, gate_check  # noqa: E402

LENGTHS = (96, 128, 192, 256, 512, 1024, 2048, 4096)
ENCODINGS = {
    "base64": lambda b: base64.b64encode(b).decode(),
    "base64url": lambda b: base64.urlsafe_b64encode(b).decode().rstrip("="),
    "base64/76": lambda b: base64.encodebytes(b).decode(),
    "hex": lambda b: b.hex(),
    "base32": lambda b: base64.b32encode(b).decode(),
    "base85": lambda b: base64.b85encode(b).decode(),
    "ascii85": lambda b: base64.a85encode(b).decode(),
}


def record(content: str, rid: str = "r1") -> dict:
    """A native training record whose last user message is ``content``."""
    return {
        "record_id": rid,
        "user_id": "alice",
        "session_id": "s1",
        "provenance": "native",
        "provider_kind": "native",
        "input": {
            "messages": [
                {"role": "system", "content": "You are helpful."},
                {"role": "user", "content": content},
            ]
        },
        "output": {"text": "Done.", "tool_calls": [], "finish_reason": "stop"},
    }


def refused(content: str) -> bool:
    """Whether the gate refuses a native record carrying ``content`` for an opaque blob."""
    verdict = gate_check([record(content)]).verdicts[0]
    return "contains_opaque_blob" in verdict.reasons


def detection(trials: int) -> None:
    rng = random.Random(1)
    print(f"== detection (bare blobs in a native record; {trials} trials per cell; % refused)")
    print(
        f"{'encoding':<12}" + "".join(f"{n:>7}" for n in LENGTHS) + "  96 B in a sentence: inline, own lines"
    )
    for name, encode in ENCODINGS.items():
        cells = []
        for n in LENGTHS:
            hits = sum(refused(encode(rng.randbytes(n))) for _ in range(trials))
            cells.append(f"{100 * hits / trials:>6.0f}%")
        inline = sum(refused(f"Sure: {encode(rng.randbytes(96)).strip()} as asked.") for _ in range(trials))
        lines = sum(refused(f"Sure:\n{encode(rng.randbytes(96)).strip()}\nas asked.") for _ in range(trials))
        print(
            f"{name:<12}" + "".join(cells) + f"  {100 * inline / trials:>6.0f}% {100 * lines / trials:>6.0f}%"
        )
    fake = FakeUpstreams()
    for label, prefix in (("fake signature (EqQB…)", "EqQB"), ("fake redacted data (EmwK…)", "EmwK")):
        hits = sum(refused(fake.issue_blob(prefix, "claude-x")) for _ in range(trials))
        print(f"{label:<28} {100 * hits / trials:>5.0f}%  (96 bytes: a SHA-256 digest x3, base64url)")
    # A realistic signature: base64 of 200-700 random bytes (protobuf-framed ciphertext).
    hits = sum(
        refused(base64.b64encode(b"\x12" + rng.randbytes(rng.randrange(200, 700))).decode())
        for _ in range(trials)
    )
    print(f"{'signature-like 200-700 B':<28} {100 * hits / trials:>5.0f}%")
    below = sum(
        refused(base64.b64encode(rng.randbytes(rng.randrange(61, MIN_OPAQUE_BYTES))).decode())
        for _ in range(trials)
    )
    print(f"{'below threshold 61-95 B':<28} {100 * below / trials:>5.0f}%  (let through by design)")


def _png_icon(rng: random.Random, size: int = 16) -> bytes:
    """A small RGBA PNG with noisy pixels (an icon: compressed binary)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + rng.randbytes(size * 4) for _ in range(size))
    ihdr = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def legit_corpus(rng: random.Random) -> dict[str, str]:
    """Texts a training record may legitimately hold (each must pass)."""
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "a",
        "lazy",
        "dog",
        "while",
        "experiments",
        "route",
        "traffic",
    ]
    prose = " ".join(rng.choice(words) for _ in range(600))
    uuids = [str(uuid.UUID(bytes=rng.randbytes(16), version=4)) for _ in range(40)]
    sha256 = [rng.randbytes(32).hex() for _ in range(12)]
    sha1 = [rng.randbytes(20).hex() for _ in range(12)]
    sha512 = [rng.randbytes(64).hex() for _ in range(6)]
    jwt_head = _b64u(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    jwt_body = _b64u(json.dumps({"sub": "1234567890", "name": "John Doe", "iat": 1516239022}).encode())
    text_blob = ("Avocado answers questions about the experiment platform. " * 40).encode()
    minified = ";".join(
        f"function {rng.choice('abcdefgh')}{i}(t,e){{return t&&e?t.{rng.choice(['map', 'filter'])}"
        f"(n=>n[e]):null}}var r{i}=[{','.join(str(rng.randrange(1000)) for _ in range(8))}]"
        for i in range(40)
    )
    return {
        "prose": prose,
        "python": "\n".join(
            f"def handler_{i}(request, *, timeout=30):\n    data = json.loads(request.body)\n"
            f"    return JsonResponse({{'id': data['id'], 'n': {i}}}, status=200)\n"
            for i in range(30)
        ),
        "javascript": "\n".join(
            f"export async function fetchItem{i}(id) {{ const r = await fetch(`/api/items/${{id}}?v={i}`); return r.json(); }}"
            for i in range(30)
        ),
        "minified js": minified,
        "json": json.dumps(
            {"items": [{"id": u, "score": rng.random(), "tags": ["a", "b"]} for u in uuids[:20]]}
        ),
        "urls with query strings": "\n".join(
            f"https://www.example.com/search?q=experiment+{i}&utm_source=newsletter&utm_medium=email"
            f"&session={uuids[i]}&page={i}&sort=desc&filter=category%3Dbooks%26price%3C20"
            for i in range(15)
        ),
        "uuid": uuids[0],
        "uuids, comma list": ", ".join(uuids),
        "uuids, one a line": "\n".join(uuids),
        "uuids, space list": " ".join(uuids),
        "sha-256": sha256[0],
        "sha-256 digests, one a line": "\n".join(sha256),
        "sha-256 digests, space list": " ".join(sha256),
        "sha-256 digests in prose": " ".join(f"file{i}.tar.gz sha256 {d}" for i, d in enumerate(sha256)),
        "sha-1 digests, one a line": "\n".join(sha1),
        "sha-512 digests, one a line": "\n".join(sha512),
        "sha256sum output": "\n".join(f"{d}  dist/pkg-{i}.whl" for i, d in enumerate(sha256)),
        "git commit ids": "\n".join(f"{d[:7]} Fix routing bug #{i}" for i, d in enumerate(sha1))
        + "\n"
        + "\n".join(f"commit {d}\nAuthor: A <a@b.c>\n\n    message {i}\n" for i, d in enumerate(sha1)),
        "jwt hs256": f"Authorization: Bearer {jwt_head}.{jwt_body}.{_b64u(rng.randbytes(32))}",
        "jwt es256": f"{_b64u(json.dumps({'alg': 'ES256'}).encode())}.{jwt_body}.{_b64u(rng.randbytes(64))}",
        "base64 of text": base64.b64encode(text_blob).decode(),
        "base64 of text, wrapped": base64.encodebytes(text_blob).decode(),
        "base64url of text": _b64u(text_blob),
        "hex of text": text_blob.hex(),
        "base32 of text": base64.b32encode(text_blob).decode(),
        "base64 of gzip text": base64.b64encode(zlib.compress(text_blob)).decode(),
        "markdown table": "| variant | users | conversion |\n|---|---|---|\n"
        + "\n".join(f"| v{i} | {rng.randrange(10**6)} | {rng.random():.4f} |" for i in range(30)),
        "long numbers": "".join(rng.choice(string.digits) for _ in range(600)),
        "number list": ", ".join(str(rng.randrange(256)) for _ in range(400)),
        "dna sequence": "".join(rng.choice("ACGT") for _ in range(2000)),
        "protein sequence": "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(1000)),
        "npm integrity hashes": "\n".join(
            f'"integrity": "sha512-{base64.b64encode(rng.randbytes(64)).decode()}",' for _ in range(10)
        ),
        "camelCase identifiers": " ".join(
            "".join(w.capitalize() for w in rng.sample(words, 6)) + "Factory" for _ in range(40)
        ),
        "file paths": "\n".join(
            f"/usr/lib/python3/site-packages/muse_{i}/routing/transcripts/gate_{i}" for i in range(40)
        ),
        "hexdump of text": "\n".join(
            f"{i * 16:08x}: "
            + " ".join(text_blob[i * 16 : i * 16 + 16].hex()[j : j + 4] for j in range(0, 32, 4))
            for i in range(40)
        ),
        "aws presigned url": "https://bucket.s3.amazonaws.com/key.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
        f"&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={sha256[1]}",
    }


def refused_by_decision(rng: random.Random) -> dict[str, str]:
    """Opaque binary the gate refuses on purpose (conservative default for training data)."""
    jwt_body = _b64u(json.dumps({"sub": "1234567890", "iat": 1516239022}).encode())
    return {
        "base64 png icon 16x16": base64.b64encode(_png_icon(rng)).decode(),
        "data: url png icon": "data:image/png;base64," + base64.b64encode(_png_icon(rng)).decode(),
        "ssh-rsa public key": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ"
        + base64.b64encode(rng.randbytes(256)).decode()
        + " user@host",
        "pem certificate body": "-----BEGIN CERTIFICATE-----\n"
        + base64.encodebytes(b"\x30\x82\x03\x00" + rng.randbytes(700)).decode()
        + "-----END CERTIFICATE-----",
        "jwt rs256": f"{_b64u(json.dumps({'alg': 'RS256'}).encode())}.{jwt_body}.{_b64u(rng.randbytes(256))}",
        "gcs v4 signed url": "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256"
        f"&X-Goog-Signature={rng.randbytes(256).hex()}",
        "long random api key": "sk-"
        + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(160)),
    }


def false_positives() -> None:
    rng = random.Random(2)
    legit = legit_corpus(rng)
    print(f"\n== false positives (legit corpus, {len(legit)} texts; must pass)")
    bad = []
    for name, text in legit.items():
        verdict = gate_check([record(text)]).verdicts[0]
        status = "pass" if verdict.accepted else f"REFUSED ({verdict.detail})"
        if not verdict.accepted:
            bad.append(name)
        print(f"  {name:<32} {len(text):>6} chars  {status}")
    print(f"  FP rate: {len(bad)}/{len(legit)} = {100 * len(bad) / len(legit):.1f}%")
    print("\n== refused by decision (opaque binary, harmless or not)")
    for name, text in refused_by_decision(rng).items():
        print(f"  {name:<32} {'refused' if refused(text) else 'passes'}")


def timing(repeats: int) -> None:
    rng = random.Random(3)
    legit = legit_corpus(rng)
    content = (
        legit["prose"][:1500] + "\n```python\n" + legit["python"][:1500] + "\n```\n" + legit["json"][:900]
    )[:4000]
    rec = record(content)
    size = len(gate.record_json(rec).encode())

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times) * 1e6

    before = best(lambda: find_encrypted_reasoning(rec))
    after = best(lambda: find_encrypted_reasoning(rec, opaque_blobs=True))
    check = best(lambda: gate_check([rec]))
    blob_rec = record(content + "\n" + base64.b64encode(os.urandom(512)).decode())
    blob_before = best(lambda: find_encrypted_reasoning(blob_rec))
    blob_after = best(lambda: find_encrypted_reasoning(blob_rec, opaque_blobs=True))
    print(f"\n== timing (best of {repeats})")
    print(
        f"  typical record ({size} B): detector {before:.0f} us, with opaque rule {after:.0f} us (x{after / before:.2f});"
    )
    print(f"  gate_check (rule on) {check:.0f} us")
    print(
        f"  same record + a 512-byte base64 blob: {blob_before:.0f} us -> {blob_after:.0f} us "
        f"(x{blob_after / blob_before:.2f})"
    )


def scan(roots: list[str]) -> None:
    suffixes = {
        ".py",
        ".md",
        ".rst",
        ".txt",
        ".json",
        ".js",
        ".html",
        ".cfg",
        ".toml",
        ".yaml",
        ".yml",
        ".css",
    }
    files = refused_files = size = 0
    start = time.perf_counter()
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            if path.suffix not in suffixes or not path.is_file():
                continue
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            if len(text) > 400_000:
                continue
            files += 1
            size += len(text)
            found = [
                f
                for f in find_encrypted_reasoning({"content": text}, opaque_blobs=True)
                if f.kind == "opaque_blob"
            ]
            if found:
                refused_files += 1
                print(f"  refused: {path} ({found[0].path})")
    elapsed = time.perf_counter() - start
    print(
        f"\n== scan: {files} files, {size / 1e6:.1f} MB, {refused_files} with an opaque blob, {elapsed:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--scan", nargs="*", default=[], metavar="DIR", help="also scan these trees' files")
    args = parser.parse_args()
    detection(args.trials)
    false_positives()
    timing(args.repeats)
    if args.scan:
        scan(args.scan)


if __name__ == "__main__":
    main()
