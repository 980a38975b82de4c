"""NUL characters at the storage boundary (pure helper)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from muse_experiments.infra.storage_text import (
    _SURROGATE,
    NUL_ESCAPE,
    _first_path,
    nul_path,
    storable,
    surrogate_path,
    unstorable_paths,
)


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


def test_a_value_json_cannot_write_or_a_lookalike_escape_is_settled_by_the_walk():
    """The JSON-text fast path only clears values whose text shows no hit; the rest are walked."""
    lookalike = {"path": "C:\\u0000dir", "re": "\\ud800"}  # backslash-u text, no NUL, no surrogate
    assert nul_path(lookalike) is None
    assert surrogate_path(lookalike) is None
    not_json = {"when": object(), "rows": ({"a": "x\u0000"},)}  # json.dumps raises TypeError
    assert nul_path(not_json) == "rows[0].a"
    deep: list = ["\u0000"]
    for _ in range(5000):  # deeper than json's recursion limit
        deep = [deep]
    assert nul_path(deep) == "[0]" * 5000 + "[0]"
    assert surrogate_path({"k": ["ok", {"\udfff": 1}]}) == "k[1].\\udfff"


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from("ab\\u0\x00\ud800é")),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(
                st.text(alphabet=st.sampled_from("k\\u0\x00\udfff"), max_size=3), children, max_size=4
            )
        ),
        max_leaves=20,
    )
)
def test_the_fast_path_finds_what_the_walk_finds(value):
    assert nul_path(value) == _first_path(value, "", lambda text: "\x00" in text)
    assert surrogate_path(value) == _first_path(value, "", _SURROGATE.search)
    assert unstorable_paths(value, "p") == (
        _first_path(value, "p", lambda text: "\x00" in text),
        _first_path(value, "p", _SURROGATE.search),
    )
