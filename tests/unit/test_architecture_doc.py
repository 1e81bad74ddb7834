"""ARCHITECTURE.md cites only what exists: every file path and every `package.module.Name`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "kubescribe"
DOC = (ROOT / "ARCHITECTURE.md").read_text()
CITED = sorted(set(re.findall(r"`([^`\s]+)`", DOC)))
# A path: it has a slash or a file name's extension (`cli.py`, `tests/e2e`, `checkup/`).
PATHS = [c for c in CITED if "/" in c or re.fullmatch(r"[\w.-]+\.(py|md|toml|ya?ml|sh)", c)]
# A dotted name that starts with one of the package's modules: `mirror.authors.AuthorResolver`.
TOP = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
DOTTED = [
    c.removesuffix("()")
    for c in CITED
    if c not in PATHS
    and re.fullmatch(r"(kubescribe\.)?[a-z_]+(\.\w+)+(\(\))?", c)
    and c.removeprefix("kubescribe.").split(".")[0] in TOP
]


def test_the_page_cites_paths_and_names() -> None:
    assert len(PATHS) > 50
    assert len(DOTTED) > 10


@pytest.mark.parametrize("cited", PATHS)
def test_every_cited_path_exists(cited: str) -> None:
    """From the repository's root, or from the package (`git/build.py`)."""
    assert (ROOT / cited).exists() or (PACKAGE / cited).exists(), cited


@pytest.mark.parametrize("cited", DOTTED)
def test_every_cited_module_and_name_exists(cited: str) -> None:
    parts = cited.removeprefix("kubescribe.").split(".")
    for split in range(len(parts), 0, -1):
        module = PACKAGE.joinpath(*parts[:split])
        source = module.with_suffix(".py") if module.with_suffix(".py").exists() else None
        if source is None and (module / "__init__.py").exists():
            source = module / "__init__.py"
        if source is not None:
            break
    else:
        pytest.fail(f"no module for {cited}")
    names = parts[split:]
    assert len(names) <= 1, cited
    if names:
        defined = rf"^(class|def|async def) {names[0]}\b|^{names[0]}\b.*="
        assert re.search(defined, source.read_text(), re.MULTILINE), cited
