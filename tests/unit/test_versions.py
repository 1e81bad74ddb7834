"""One version names the package, `kubescribe version`, the chart and the image."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

import kubescribe

ROOT = Path(__file__).resolve().parents[2]


def test_package_cli_chart_and_image_agree() -> None:
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "charts" / "kubescribe" / "Chart.yaml").read_text())
    dockerfile = (ROOT / "Dockerfile").read_text()
    image = re.search(r"^ARG VERSION=(\S+)$", dockerfile, re.MULTILINE)
    assert image is not None, "Dockerfile: ARG VERSION=<version>"
    assert {package, kubescribe.__version__, chart["version"], chart["appVersion"]} == {
        image.group(1)
    }


def test_versions_are_semver() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", kubescribe.__version__)
