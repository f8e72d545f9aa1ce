"""The key contract against the shared vectors (clients/key-vectors.json)."""

import json

import pytest

from kube2nats import (
    escape_key_token,
    escape_subject_token,
    event_subject,
    key_filter,
    object_key,
    parse_key,
    subject_filter,
    unescape_key_token,
)
from support import KEY_VECTORS

VECTORS = json.loads(KEY_VECTORS.read_text(encoding="utf-8"))


@pytest.mark.parametrize("v", VECTORS["tokens"], ids=lambda v: repr(v["text"]))
def test_token_vectors(v):
    assert escape_key_token(v["text"]) == v["key"]
    assert escape_subject_token(v["text"]) == v["subject"]
    assert unescape_key_token(v["key"]) == v["text"]


@pytest.mark.parametrize("v", VECTORS["keys"], ids=lambda v: v["key"])
def test_key_vectors(v):
    key = object_key(v["group"], v["version"], v["resource"], v["namespace"], v["name"], cluster=v["cluster"] or None)
    assert key == v["key"]
    assert parse_key(v["key"]) == (v["namespace"], v["name"])
    subject = event_subject(
        v["group"], v["version"], v["resource"], v["namespace"], v["name"], "ADDED", cluster=v["cluster"] or None
    )
    assert subject == v["subject"]


def test_there_are_vectors():
    assert len(VECTORS["tokens"]) >= 20 and len(VECTORS["keys"]) >= 5


def test_filters():
    assert key_filter("pods") == "core.*.pods.*.*"
    assert key_filter("pods", version="v1", namespace="shop") == "core.v1.pods.shop.*"
    assert key_filter("widgets", group="example.com", cluster="eu-1.prod") == "eu-1_prod.example_com.*.widgets.*.*"
    assert key_filter("pods", namespace="my_ns") == "core.*.pods.my=5Fns.*"
    assert subject_filter("pods") == "kube.core.*.pods.*.*.*"
    assert subject_filter("pods", version="v1", namespace="my_ns", prefix="k", cluster="east") == "k.east.core.v1.pods.my%5Fns.*.*"


def test_unescape_leaves_what_is_not_an_escape():
    # Not produced by the escaping, read leniently: a "=" without two hex digits stays.
    assert unescape_key_token("a=Zb") == "a=Zb"
    assert unescape_key_token("a=4") == "a=4"
    assert unescape_key_token("=41") == "A"


def test_parse_key_refuses_a_single_token():
    with pytest.raises(ValueError):
        parse_key("nodots")
