import math
import string
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from kubescribe.mirror.yamlfmt import dump_yaml, load_yaml, needs_quotes, order_document

# fmt: off
AMBIGUOUS = [
    # booleans, every YAML 1.1 spelling
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
    "true", "True", "TRUE", "false", "False", "FALSE",
    "on", "On", "ON", "off", "Off", "OFF",
    # null
    "null", "Null", "NULL", "~", "",
    # ints
    "0", "12", "-3", "+12", "014", "0o14", "0x1F", "0b101", "1_000", "1:20", "-1:20:30",
    # go-yaml v3 (sops) drops every underscore before it parses a number
    "0_X0", "0_x1F", "_1", "1_e3", "0_b1", "1_._5",
    # floats
    "1.5", "1e3", "1E3", "1e-3", ".5", "-.5", "1.", "1.0e+3", "+.5", "190:20:30.15",
    ".inf", ".Inf", ".INF", "-.inf", "-.INF", "+.inf", ".nan", ".NaN", ".NAN",
    # timestamps
    "2024-01-01", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10 -5",
    "2001-12-14T21:59:43Z",
    # whitespace at either end
    " a", "a ", "\ta",
    # YAML 1.1 value key and merge key
    "=", "<<",
    # things the emitter quotes by itself
    "- a", "a: b", "#x", "a #b", "@x", "`x", "*x", "&x", "!x", "%x", "{a}", "[a]",
    "'", '"', "---", "...", "?", ":",
]
# fmt: on

PLAIN = ["nginx", "hello world", "v1", "1.2.3", "app.kubernetes.io/name", "é", "a=b", "yes-no"]

_RUAMEL = YAML(typ="safe", pure=True)


def read_all_ways(text: str) -> list[Any]:
    """The tree as PyYAML (YAML 1.1), ruamel in YAML 1.2 and ruamel in YAML 1.1 read it."""
    return [
        yaml.safe_load(text),
        _RUAMEL.load(text),
        _RUAMEL.load("%YAML 1.1\n---\n" + text),
    ]


def assert_round_trips(tree: Any) -> str:
    text = dump_yaml(tree)
    assert read_all_ways(text) == [tree, tree, tree]
    assert load_yaml(text) == tree
    assert load_yaml(text.encode()) == tree
    assert dump_yaml(tree) == text
    return text


@pytest.mark.parametrize("s", AMBIGUOUS)
def test_ambiguous_scalars_are_quoted(s: str) -> None:
    assert needs_quotes(s)
    text = assert_round_trips({"k": s, s: [s]})
    assert text.startswith(("k: '", 'k: "'))


def test_quotes_are_single_unless_escapes_are_needed() -> None:
    assert dump_yaml({"k": "yes"}) == "k: 'yes'\n"
    assert dump_yaml({"k": "it's"}) == "k: it's\n"
    assert dump_yaml({"k": "'yes'"}) == "k: '''yes'''\n"
    assert dump_yaml({"k": "\ta"}) == 'k: "\\ta"\n'


@pytest.mark.parametrize("s", PLAIN)
def test_plain_strings_stay_plain(s: str) -> None:
    assert not needs_quotes(s)
    assert assert_round_trips({"k": s}) == f"k: {s}\n"


def test_scalars_and_empty_collections() -> None:
    tree: dict[str, Any] = {
        "i": 1,
        "f": 1.5,
        "big": 1e17,
        "t": True,
        "nil": None,
        "m": {},
        "l": [],
        "s": "x",
    }
    assert assert_round_trips(tree) == (
        "i: 1\nf: 1.5\nbig: 1.0e+17\nt: true\nnil: null\nm: {}\nl: []\ns: x\n"
    )
    assert assert_round_trips({"inf": float("inf"), "ninf": float("-inf")}) == (
        "inf: .inf\nninf: -.inf\n"
    )
    assert dump_yaml({"nan": float("nan")}) == "nan: .nan\n"
    assert math.isnan(read_all_ways("nan: .nan\n")[1]["nan"])


def test_lists_are_indented_like_kubectl() -> None:
    tree = {"spec": {"containers": [{"name": "a", "args": ["x", "z"]}]}}
    assert dump_yaml(tree) == ("spec:\n  containers:\n  - name: a\n    args:\n    - x\n    - z\n")


def test_shared_objects_are_not_anchored() -> None:
    shared = {"a": 1}
    assert dump_yaml({"p": shared, "q": shared}) == "p:\n  a: 1\nq:\n  a: 1\n"


def test_multiline_strings_are_literal_blocks() -> None:
    assert assert_round_trips({"k": "line1\nline2\n"}) == "k: |\n  line1\n  line2\n"
    assert assert_round_trips({"k": "line1\nline2"}) == "k: |-\n  line1\n  line2\n"


@pytest.mark.parametrize(
    "s",
    [
        "trailing \nspace",
        "a\n  ",
        "a\r\nb",
        "a\rb",
        "a\x85b",
        "a\u2028b\u2029",
        "  indented\nfirst line\n",
        "\nleading break",
        "kept\n\n\n",
        "tab\tinside\nblock",
        "---\n...\n",
    ],
)
def test_multiline_strings_round_trip_even_when_not_literal(s: str) -> None:
    assert needs_quotes(s)
    assert_round_trips({"k": s, "next": 1})


def test_long_lines_are_never_wrapped() -> None:
    words = " ".join(["word"] * 100)
    assert len(words) > 490
    for s in (words, words + "\t", "yes " + words + " "):
        assert dump_yaml({"k": s}).count("\n") == 1
        assert_round_trips({"k": s})
    assert dump_yaml({words: 1}) == f"? {words}\n: 1\n"
    assert_round_trips({words: 1})


def test_output_uses_lf_only() -> None:
    text = dump_yaml({"k": "a\nb", "l": ["x"]})
    assert "\r" not in text


def test_order_document() -> None:
    doc = {
        "z": {"b": 1, "a": [{"y": 1, "x": 2}]},
        "spec": {"replicas": 1},
        "metadata": {
            "uid": "u",
            "annotations": {"b": "1", "a": "2"},
            "labels": {"z": "1", "a": "2"},
            "namespace": "ns",
            "generateName": "g",
            "name": "n",
        },
        "kind": "Thing",
        "apiVersion": "v1",
    }
    ordered = order_document(doc)
    assert list(ordered) == ["apiVersion", "kind", "metadata", "spec", "z"]
    assert list(ordered["metadata"]) == [
        "name",
        "namespace",
        "labels",
        "annotations",
        "generateName",
        "uid",
    ]
    assert list(ordered["metadata"]["labels"]) == ["a", "z"]
    assert list(ordered["metadata"]["annotations"]) == ["a", "b"]
    assert list(ordered["z"]) == ["a", "b"]
    assert list(ordered["z"]["a"][0]) == ["x", "y"]
    assert ordered == doc
    assert list(doc) == ["z", "spec", "metadata", "kind", "apiVersion"]


def test_order_document_without_metadata_map() -> None:
    assert list(order_document({"kind": "K", "metadata": None, "a": 1})) == [
        "kind",
        "metadata",
        "a",
    ]


tricky_text = st.one_of(
    st.text(),
    st.text(alphabet=" \t\n\r\x85\u2028ab0'\"#:-|>", max_size=12),
    st.sampled_from(AMBIGUOUS),
    st.from_regex(r"[-+]?[0-9_.:eExXoObB]{1,8}", fullmatch=True),
    st.from_regex(
        r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ][0-9]{1,2}:[0-9]{2}:[0-9]{2})?", fullmatch=True
    ),
    st.from_regex(r"(?i)(y|n|yes|no|on|off|true|false|null|\.inf|\.nan)", fullmatch=True),
    st.text(alphabet=string.digits + "0", min_size=1, max_size=6).map(lambda s: "0" + s),
)

json_scalars = st.one_of(
    tricky_text,
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)

trees = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(tricky_text, children, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=500)
@given(tricky_text)
def test_any_string_round_trips(s: str) -> None:
    assert_round_trips({"k": s, s: s})
    assert_round_trips([s])


@settings(max_examples=500)
@given(tricky_text)
def test_needs_quotes_matches_the_output(s: str) -> None:
    text = dump_yaml({"k": s})
    assert (text != f"k: {s}\n") == needs_quotes(s)


@settings(max_examples=300)
@given(st.dictionaries(tricky_text, trees, max_size=5))
def test_any_tree_round_trips(tree: dict[str, Any]) -> None:
    assert_round_trips(tree)
    assert_round_trips(order_document(tree))
