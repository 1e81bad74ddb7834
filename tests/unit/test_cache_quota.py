"""The cache quota's arithmetic: sizes as Kubernetes quantities, what is left, when it is past;
the flag that sets it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from kubescribe import cli
from kubescribe.git.cachequota import NamespaceCache
from kubescribe.git.quota import allowance, exceeds, format_size, parse_size, refusal_message
from kubescribe.git.repo import CacheBusy


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 0),
        ("1024", 1024),
        ("200Ki", 200 << 10),
        ("256Mi", 256 << 20),
        ("2Gi", 2 << 30),
        ("1Ti", 1 << 40),
        ("1k", 1000),
        ("5M", 5_000_000),
        ("1G", 10**9),
        (" 64Mi ", 64 << 20),
    ],
)
def test_sizes_parse_as_kubernetes_quantities(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1", "1.5Gi", "256MB", "256m", "Mi", "1 Gi", "ten"])
def test_other_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_sizes_are_written_in_the_largest_whole_binary_unit() -> None:
    assert [format_size(n) for n in (0, 1000, 200 << 10, 1536 << 10, 256 << 20, 3 << 30)] == [
        "0",
        "1000",
        "200Ki",
        "1536Ki",
        "256Mi",
        "3Gi",
    ]


def test_no_quota_allows_anything() -> None:
    assert allowance(0, 10**12) is None
    assert not exceeds(0, 10**12)


def test_what_is_left_of_a_quota_is_never_negative() -> None:
    assert allowance(1000, 0) == 1000
    assert allowance(1000, 400) == 600
    assert allowance(1000, 1000) == 0
    assert allowance(1000, 5000) == 0


def test_a_namespace_exceeds_its_quota_only_past_it() -> None:
    assert not exceeds(1000, 1000)
    assert exceeds(1000, 1001)


def test_the_refusal_names_the_quota_and_the_flag() -> None:
    message = refusal_message(256 << 20)
    assert "256Mi" in message
    assert "--cache-quota-per-namespace" in message


def test_the_flag_refuses_a_size_it_cannot_read() -> None:
    result = CliRunner().invoke(cli.main, ["run", "--cache-quota-per-namespace=1.5Gi"])
    assert result.exit_code == 2
    assert "--cache-quota-per-namespace" in result.output
    assert "not a size" in result.output


def test_a_turn_held_too_long_by_another_writer_is_cache_busy(tmp_path: Path) -> None:
    cache = NamespaceCache(tmp_path, 1 << 20, "tenant-a")
    cache.turn_timeout = 0.1
    holding, done = threading.Event(), threading.Event()

    def hung_fetch() -> None:  # a transfer that never ends holds the namespace's turn
        with cache.room():
            holding.set()
            done.wait(30)

    other = threading.Thread(target=hung_fetch)
    other.start()
    try:
        assert holding.wait(10)
        with pytest.raises(CacheBusy, match="held its cache"), cache.room():
            pass
    finally:
        done.set()
        other.join()
    with cache.room() as room:  # the turn is free again
        assert room == 1 << 20
