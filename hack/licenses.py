"""The licence of every locked runtime dependency, checked against what Apache-2.0 can ship.

Reads the runtime packages from `uv.lock` (`uv export --no-dev`) and each one's licence from its
installed metadata (License-Expression, License, or Trove classifiers). Prints the list; exits 1
when a licence is neither allowed nor reviewed in `hack/licenses-reviewed.txt`.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from packaging.markers import Marker

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = re.compile(
    r"\b(MIT|BSD|Apache|ISC|PSF|Python Software Foundation|MPL|Mozilla Public License 2\.0|"
    r"Unlicense|Zlib|CC0)\b",
    re.IGNORECASE,
)
COPYLEFT = re.compile(r"\b(GPL|AGPL|SSPL|EUPL)\b")  # LGPL is reviewed case by case


def runtime_packages() -> list[str]:
    out = subprocess.run(
        ["uv", "export", "--frozen", "--no-dev", "--no-hashes", "--no-emit-project"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = []
    for line in out.splitlines():
        if "==" not in line or line.startswith("#"):
            continue
        requirement, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue  # not installed on this Python (e.g. a backport)
        names.append(requirement.split("==")[0].strip())
    return sorted(names)


def licence_of(name: str) -> str:
    meta = importlib.metadata.metadata(name)
    expression = meta.get("License-Expression")
    if expression:
        return str(expression)
    classifiers = [
        c.split("::")[-1].strip()
        for c in meta.get_all("Classifier") or []
        if (c.startswith("License ::") and "OSI Approved ::" in c) or c.startswith("License :: ")
    ]
    classifiers = [c for c in classifiers if c != "OSI Approved"]
    if classifiers:
        return " / ".join(classifiers)
    text = str(meta.get("License") or "").strip().splitlines()
    if text:
        return text[0][:80]
    for file in meta.get_all("License-File") or []:  # the licence text shipped in the wheel
        dist = importlib.metadata.distribution(name)
        found = dist.read_text(f"licenses/{file}") or dist.read_text(file)
        if found and found.strip():
            return found.strip().splitlines()[0][:80]
    return "UNKNOWN"


def main() -> int:
    reviewed = {
        line.split()[0]: line
        for line in (ROOT / "hack" / "licenses-reviewed.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    failed = []
    for name in runtime_packages():
        licence = licence_of(name)
        ok = (ALLOWED.search(licence) and not COPYLEFT.search(licence)) or name in reviewed
        print(f"{'ok ' if ok else 'NO '} {name:28} {licence}")
        if not ok:
            failed.append(name)
    if failed:
        print(f"licences not allowed or reviewed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
