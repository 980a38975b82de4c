"""Conformance of the GrowthBook primitives with GrowthBook's published SDK test cases.

Vectors: the vendored full set (``tests/data/growthbook_cases.json``, GrowthBook
``packages/sdk-js/test/cases.json``, specVersion 0.9.0, MIT). It contains every case of the team's
shared subset, so the tests need nothing outside the repository (a bare clone runs them all).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muse_experiments.experiments.assignment.growthbook import conditions, hashing

VENDORED = Path(__file__).resolve().parents[3] / "data" / "growthbook_cases.json"
FILES = {"full": json.loads(VENDORED.read_text(encoding="utf-8"))}


def _cases(section: str, ident) -> list:
    params = []
    for src, data in FILES.items():
        for case in data.get(section, []):
            params.append(
                pytest.param(*case if section != "getEqualWeights" else case, id=f"{src}:{ident(case)}")
            )
    return params


def _condition_cases() -> list:
    params = []
    for src, data in FILES.items():
        cases = list(data.get("evalCondition", []))
        cases += [
            [f"savedGroupReferencesV2/{c[0]}", *c[1:]]
            for c in data.get("savedGroupReferencesV2", {}).get("evalCondition", [])
        ]
        for c in cases:
            name, condition, attributes, expected = c[:4]
            saved = c[4] if len(c) > 4 else None
            params.append(pytest.param(condition, attributes, expected, saved, id=f"{src}:{name}"))
    return params


def _r6(ranges) -> list:
    return [[round(a, 6), round(b, 6)] for a, b in ranges]


def test_vendored_file_names_its_source():
    src = FILES["full"]["_source"]
    assert src["repository"] == "growthbook/growthbook"
    assert src["path"] == "packages/sdk-js/test/cases.json"
    assert src["specVersion"] == FILES["full"]["specVersion"]


@pytest.mark.parametrize(
    ("seed", "value", "version", "expected"), _cases("hash", lambda c: f"{c[0]!r}|{c[1]!r}|v{c[2]}")
)
def test_hash_matches_growthbook(seed, value, version, expected):
    got = hashing.hash(seed, value, version)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(("name", "args", "expected"), _cases("getBucketRange", lambda c: c[0]))
def test_get_bucket_ranges_matches_growthbook(name, args, expected):
    num, coverage, weights = args
    assert _r6(hashing.get_bucket_ranges(num, coverage, weights)) == _r6(expected)


@pytest.mark.parametrize(("name", "n", "ranges", "expected"), _cases("chooseVariation", lambda c: c[0]))
def test_choose_variation_matches_growthbook(name, n, ranges, expected):
    assert hashing.choose_variation(n, ranges) == expected


@pytest.mark.parametrize(("name", "user_id", "namespace", "expected"), _cases("inNamespace", lambda c: c[0]))
def test_in_namespace_matches_growthbook(name, user_id, namespace, expected):
    assert hashing.in_namespace(user_id, tuple(namespace)) is expected


@pytest.mark.parametrize(("n", "expected"), _cases("getEqualWeights", lambda c: f"n={c[0]}"))
def test_get_equal_weights_matches_growthbook(n, expected):
    got = hashing.get_equal_weights(n)
    assert [round(x, 8) for x in got] == [round(x, 8) for x in expected]


@pytest.mark.parametrize(("condition", "attributes", "expected", "saved_groups"), _condition_cases())
def test_eval_condition_matches_growthbook(condition, attributes, expected, saved_groups):
    assert conditions.eval_condition(attributes, condition, saved_groups) is expected


# ----------------------------------------------------------------------------- UTF-16 hashing


def _js_fnv(s: str) -> int:
    """Independent transcription of GrowthBook's JS ``hashFnv32a`` (util.ts): ``charCodeAt`` code
    units, shift-add multiplication, ``>>> 0``."""
    units = s.encode("utf-16-le", "surrogatepass")
    hval = 0x811C9DC5
    for i in range(0, len(units), 2):
        hval ^= units[i] | (units[i + 1] << 8)
        hval = (hval + (hval << 1) + (hval << 4) + (hval << 7) + (hval << 8) + (hval << 24)) & 0xFFFFFFFF
    return hval


def _byte_fnv(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) % 2**32
    return h


# Values computed by node v20 running GrowthBook's hashFnv32a/hash (util.ts) verbatim.
NODE_VALUES = [
    ("", "é", 1, 0.94, 1812687940),
    ("", "é", 2, 0.8917, 1812687940),
    ("seed", "ü-user", 2, 0.7929, 3960796628),
    ("", "😀", 1, 0.472, 3409036472),
    ("", "😀", 2, 0.4971, 3409036472),
    ("seed", "user-😀-ß", 2, 0.8839, 150822143),
    ("exp", "日本語", 2, 0.931, 636083021),
    ("", "abc", 2, 0.9165, 440920331),
]


@pytest.mark.parametrize(("seed", "value", "version", "expected", "fnv"), NODE_VALUES, ids=lambda v: repr(v))
def test_non_ascii_ids_hash_like_the_javascript_sdk(seed, value, version, expected, fnv):
    assert hashing.fnv1a32(seed + value) == fnv == _js_fnv(seed + value)
    assert hashing.hash(seed, value, version) == pytest.approx(expected, abs=1e-12)


def test_ascii_string_hashes_like_its_bytes():
    for s in ["", "a", "user-123", '()**(%$##$%#$#___)((*":&']:
        assert hashing.fnv1a32(s) == _byte_fnv(s.encode("ascii"))


def test_bmp_char_is_one_code_unit_and_emoji_is_two_surrogates():
    assert hashing.utf16_code_units("é") == (0xE9,)
    assert hashing.utf16_code_units("😀") == (0xD83D, 0xDE00)
    # a BMP char is XORed in whole, not as its UTF-8 bytes
    assert hashing.fnv1a32("é") != _byte_fnv("é".encode())
    assert hashing.fnv1a32("é") == _byte_fnv(b"\xe9")


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text())
def test_fnv_equals_js_algorithm_for_any_text(a, b):
    assert hashing.fnv1a32(a + b) == _js_fnv(a + b)
    assert hashing.fnv1a32_continue(hashing.fnv1a32(a), b) == hashing.fnv1a32(a + b)


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed")
def test_live_cross_check_with_node():
    samples = ["", "é", "😀", "user-😀-ß", "日本語", "a\U0001f680b", "\ud800lone"]
    script = (
        "function f(s){let h=0x811c9dc5;for(let i=0;i<s.length;i++){h^=s.charCodeAt(i);"
        "h+=(h<<1)+(h<<4)+(h<<7)+(h<<8)+(h<<24);}return h>>>0;}"
        "const xs=JSON.parse(process.argv[1]);console.log(JSON.stringify(xs.map(f)));"
    )
    arg = json.dumps(samples, ensure_ascii=True)
    out = subprocess.run(["node", "-e", script, arg], capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(out.stdout) == [hashing.fnv1a32(s) for s in samples]


# ----------------------------------------------------------------------------- invalid input


@pytest.mark.parametrize(
    ("coverage", "weights", "expected"),
    [
        (math.nan, None, [[0, 0.5], [0.5, 1]]),
        (None, None, [[0, 0.5], [0.5, 1]]),
        (2, [0.3, 0.7], [[0, 0.3], [0.3, 1]]),
        (1, [math.nan, 1.0], [[0, 0.5], [0.5, 1]]),
        (1, [1.2, -0.2], [[0, 0.5], [0.5, 1]]),
        (1, [True, False], [[0, 0.5], [0.5, 1]]),
        (1, "ab", [[0, 0.5], [0.5, 1]]),
    ],
)
def test_bad_coverage_and_weights_fall_back_like_growthbook(coverage, weights, expected):
    assert _r6(hashing.get_bucket_ranges(2, coverage, weights)) == _r6(expected)


@pytest.mark.parametrize(
    "condition",
    [
        {"$or": "not-a-list"},
        {"$and": None},
        {"a": {"$in": None}},
        {"a": {"$size": {"$gt": None}}},
        {"a": {"$regex": 5}},
        {"$not": "x"},
        {"a": {"$elemMatch": 3}},
    ],
)
def test_malformed_conditions_never_raise(condition):
    assert conditions.eval_condition({"a": [1, 2]}, condition) in (True, False)


def test_unknown_operator_never_includes_even_under_not():
    assert conditions.eval_condition({"a": 1}, {"a": {"$bogus": 1}}) is False
    assert conditions.eval_condition({"a": 1}, {"$not": {"a": {"$bogus": 1}}}) is False
    assert conditions.eval_condition({"a": 1}, {"a": {"$not": {"$bogus": 1}}}) is False


def test_compiled_flat_condition_agrees_with_eval_condition():
    cond = {"subagent": "coder", "tier": "1"}
    fn = conditions.compile_condition(cond)
    for attrs in [
        {},
        {"subagent": "coder"},
        {"subagent": "coder", "tier": 1},
        {"subagent": "coder", "tier": "1"},
        {"subagent": "x", "tier": "1"},
        {"subagent": None, "tier": True},
    ]:
        assert fn(attrs) is conditions.eval_condition(attrs, cond)
