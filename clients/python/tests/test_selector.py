"""Label selectors as Kubernetes reads them."""

import pytest

from kube2nats import parse_selector

LABELS = {"app": "web", "tier": "front", "env": "prod", "n": "7"}


@pytest.mark.parametrize(
    "selector, matches",
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("env in (prod,staging)", True),
        ("env in (dev, staging)", False),
        ("env notin (dev,staging)", True),
        ("env notin (prod)", False),
        ("missing notin (a)", True),
        ("missing in (a)", False),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("app=web, env in (prod), !legacy", True),
        ("n>5", True),
        ("n<5", False),
        ("missing>5", False),
        ("app=", False),
        ("example.com/role!=x", True),
    ],
)
def test_selector(selector, matches):
    assert parse_selector(selector)(LABELS) is matches


def test_an_object_without_labels():
    assert parse_selector("!a")(None)
    assert parse_selector("a!=b")(None)
    assert not parse_selector("a")(None)
    assert not parse_selector("a=b")(None)
    assert parse_selector(None)(None)


def test_a_mapping_is_equalities():
    assert parse_selector({"app": "web", "env": "prod"})(LABELS)
    assert not parse_selector({"app": "db"})(LABELS)


@pytest.mark.parametrize("bad", ["app in (a", "app)=b", "=x", "app in a,b", "a=b=c", "a b"])
def test_invalid_selectors(bad):
    with pytest.raises(ValueError):
        parse_selector(bad)
