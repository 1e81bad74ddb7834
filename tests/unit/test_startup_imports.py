"""What start-up loads: the command line and `kubescribe version` load none of the operator,
and the operator's wiring loads what only some configurations use only when configured.

Each check runs a fresh interpreter and reads its `sys.modules`: an import added at the top of
a module shows up here, whatever the machine's speed (the times are in bench/startup.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

# Libraries the operator needs; none has any use in the command line itself.
OPERATOR_LIBRARIES = frozenset(
    {
        "aiohttp",
        "cryptography",
        "kubernetes_asyncio",
        "prometheus_client",
        "pydantic",
        "pygit2",
        "pyrage",
        "re2",
        "redis",
        "ruamel",
        "structlog",
        "yaml",
    }
)
# The modules of kubescribe that declaring the commands and their flags needs.
COMMAND_LINE = frozenset(
    {
        "kubescribe",
        "kubescribe.__main__",
        "kubescribe.cli",
        "kubescribe.cli_history",
        "kubescribe.cli_options",
        "kubescribe.defaults",
        "kubescribe.store",
        "kubescribe.store.redis_options",
    }
)
# Used only when configured: Redis (--redis-url), operator-managed webhook certificates
# (--webhook-cert-secret), kubeconfigs that need the Kubernetes client's loader, SOPS and age
# (a target that encrypts), keys and CA bundles (a Secret that holds them).
OPTIONAL = frozenset(
    {
        "redis",
        "kubescribe.store.redis",
        "kubescribe.store.redis_client",
        "kubescribe.store.redis_cursors",
        "kubescribe.controller.certrotation",
        "kubescribe.controller.webhookcerts",
        "kubernetes_asyncio",
        "kubescribe.secrets.sops",
        "kubescribe.secrets.age",
        "cryptography",
        "pyrage",
    }
)


def loaded(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def packages(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_importing_the_command_line_loads_no_part_of_the_operator() -> None:
    modules = loaded("import kubescribe.cli")
    assert packages(modules) & OPERATOR_LIBRARIES == set()
    assert {m for m in modules if m.startswith("kubescribe")} <= COMMAND_LINE


def test_kubescribe_version_loads_no_part_of_the_operator() -> None:
    code = (
        "import runpy, sys\n"
        "sys.argv = ['kubescribe', 'version']\n"
        "try:\n"
        "    runpy.run_module('kubescribe', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code"
    )
    modules = loaded(code)
    assert "kubescribe.cli" in modules
    assert packages(modules) & OPERATOR_LIBRARIES == set()
    assert {m for m in modules if m.startswith("kubescribe")} <= COMMAND_LINE


def test_the_operator_loads_optional_features_only_when_configured() -> None:
    """`kubescribe.app` wires everything `run` starts by default."""
    modules = loaded("import kubescribe.app")
    assert "kubescribe.controller.manager" in modules
    assert modules & OPTIONAL == set()
