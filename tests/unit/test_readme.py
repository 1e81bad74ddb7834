"""The README's field reference is generated from the models and must not go stale."""

from __future__ import annotations

from kubescribe_devenv.apidoc import README, updated


def test_field_reference_is_current() -> None:
    text = README.read_text()
    assert updated(text) == text, "run: uv run python -m kubescribe_devenv.apidoc"


def test_readme_starts_with_the_two_setup_commands() -> None:
    block = README.read_text().split("```")[1]
    assert "bash hack/demo.sh" in block
    assert "bash hack/test.sh" in block
