"""NUL characters at the storage boundary (pure helper)."""

from __future__ import annotations

from muse_experiments.storage_text import NUL_ESCAPE, nul_path, storable


def test_nul_path_names_the_first_field_holding_a_nul():
    assert nul_path({"a": [{"b": "ok"}, {"c": "x\u0000"}]}) == "a[1].c"
    assert nul_path({"sub\u0000agent": "x"}, "attributes") == "attributes.sub\\u0000agent"
    assert nul_path("a\u0000") == "(body)"
    assert nul_path({"a": ["b", 1, None, {"c": "d"}]}) is None


def test_storable_escapes_every_nul_in_keys_and_values_and_copies_nothing_clean():
    clean = {"a": ["b"]}
    assert storable(clean) is clean
    assert storable({"k\u0000": ["v\u0000w", 3]}) == {f"k{NUL_ESCAPE}": [f"v{NUL_ESCAPE}w", 3]}
    assert storable("col1\u0000col2") == "col1\u2400col2"
