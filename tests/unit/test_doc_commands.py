"""The docs stay true to the code: every `kubescribe` command in a code block of the README,
ARCHITECTURE.md and docs/ parses against the real command line (command names, option names,
their values where the type can be checked without the machine: choices, ranges, addresses),
no link leaves the repository, and the objects docs/install.md names in its plain-manifests
commands exist in deploy/kubescribe.yaml."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml

from kubescribe import cli

ROOT = Path(__file__).resolve().parents[2]
# Every page but the CHANGELOG, which quotes the command lines of past versions.
PAGES = sorted({*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md")} - {ROOT / "CHANGELOG.md"})
ALL_PAGES = sorted({*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md")})
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
CODE_PATH = re.compile(r"`(\.\./[^`\s]*)`")
ENTRY = (["kubescribe"], ["uv", "run", "kubescribe"], ["python", "-m", "kubescribe"])
PLACEHOLDER = re.compile(r"[$<]|\.\.\.|…")


def shell_commands(block: str) -> Iterator[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments dropped, split
    at pipes, `&&`, `||` and `;`."""
    text = block.replace("\\\n", " ")
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:
            continue  # not shell (YAML, output)
        command: list[str] = []
        for token in tokens:
            if token and set(token) <= set("|&;"):
                if command:
                    yield command
                command = []
            else:
                command.append(token)
        if command:
            yield command


INLINE = re.compile(r"`((?:uv run )?kubescribe (?:[^`\[\]|]*))`")


def kubescribe_invocations() -> list[tuple[str, list[str]]]:
    """Commands in code blocks, and code spans that are a whole command (no `[optional]`
    parts, no pipe)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        spans = INLINE.findall(FENCE.sub("", text))
        for block in [*FENCE.findall(text), *spans]:
            for command in shell_commands(block):
                words = [w for w in command if "=" not in w or w.startswith("-")]
                for entry in ENTRY:
                    if words[: len(entry)] == entry:
                        args = words[len(entry) :]
                        found.append((f"{page.name}: {' '.join(command)}", args))
    return found


INVOCATIONS = kubescribe_invocations()


def parse(args: list[str]) -> None:
    """Parse as the real command line does, without running anything: option names and
    arities, subcommand names, and values whose type needs no file or network."""
    command: click.Command = cli.main
    ctx = click.Context(command, info_name="kubescribe")
    while True:
        opts, rest, order = command.make_parser(ctx).parse_args(list(args))
        for param in order:
            value = opts.get(param.name or "")
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(item, str) and not PLACEHOLDER.search(item):  # else the reader's
                    convert(ctx, param, item)
        if not isinstance(command, click.Group):
            rest = [a for a in rest if not PLACEHOLDER.fullmatch(a)]
            if rest:
                raise click.UsageError(f"unexpected arguments {rest}", ctx)
            return
        if not rest:
            return
        name, *args = rest
        if PLACEHOLDER.fullmatch(name):
            return  # `kubescribe --debug ...`: any command
        sub = command.get_command(ctx, name)
        if sub is None:
            raise click.UsageError(f"no command {name!r}", ctx)
        command, ctx = sub, click.Context(sub, info_name=name, parent=ctx)


def convert(ctx: click.Context, param: click.Parameter, item: str) -> None:
    """Check a value whose type needs no file or network, as the command line would."""
    if isinstance(param.type, (click.Choice, click.types._NumberRangeBase)):
        param.type.convert(item, param, ctx)
    if param.name in {"metrics_addr", "audit_addr", "webhook_addr"}:
        cli._address(ctx, param, item)
    if param.name == "recipients":
        cli._age_recipients(ctx, param, (item,))


def test_the_docs_show_kubescribe_commands() -> None:
    """The extraction finds the commands (a broken pattern would pass every check)."""
    shown = {" ".join(args[:1]) for _, args in INVOCATIONS}
    assert {"run", "crds", "snapshot"} <= shown


@pytest.mark.parametrize(("where", "args"), INVOCATIONS, ids=[w for w, _ in INVOCATIONS])
def test_documented_commands_parse(where: str, args: list[str]) -> None:
    try:
        parse(args)
    except click.UsageError as exc:
        pytest.fail(f"{where}: {exc.format_message()}")


def test_the_checker_refuses_what_the_cli_refuses() -> None:
    for bad in (
        ["run", "--no-such-flag"],
        ["snapshot", "--content", "Partial"],
        ["run", "--metrics-addr", "nonsense"],
        ["nope"],
        ["run", "--log-level"],
    ):
        with pytest.raises(click.UsageError):
            parse(bad)
    parse(["--debug", "run", "--log-level", "DEBUG", "--metrics-addr", ":8080"])


def test_shell_commands_are_split_like_a_shell() -> None:
    block = "a --x 1 \\\n  --y 2 | b # c\nkubescribe crds | kubectl apply -f -\n"
    assert list(shell_commands(block)) == [
        ["a", "--x", "1", "--y", "2"],
        ["b"],
        ["kubescribe", "crds"],
        ["kubectl", "apply", "-f", "-"],
    ]


@pytest.mark.parametrize("page", ALL_PAGES, ids=lambda p: p.name)
def test_no_link_leaves_the_repository(page: Path) -> None:
    """No absolute URL (the docs must be true offline and at this commit) and no relative path
    out of the repository, in links or in code spans. No exception is needed so far."""
    text = page.read_text()
    outside = [t for t in LINK.findall(text) if re.match(r"^[a-z][a-z0-9+.-]*:", t)]
    outside += AUTOLINK.findall(text)
    # Code spans that name a path: in the docs (the CHANGELOG quotes users' paths).
    spans = CODE_PATH.findall(text) if page in PAGES else []
    for target in [*LINK.findall(text), *spans]:
        path = target.partition("#")[0]
        scheme = re.match(r"^[a-z][a-z0-9+.-]*:", path)
        if path and not scheme and not (page.parent / path).resolve().is_relative_to(ROOT):
            outside.append(target)
    assert not outside, f"{page.name}: links outside the repository: {outside}"


def test_plain_manifests_commands_name_objects_that_exist() -> None:
    text = (ROOT / "docs" / "install.md").read_text()
    section = text.split("## Plain manifests", 1)[1].split("\n## ", 1)[0]
    [block] = FENCE.findall(section)
    objects = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
        for d in yaml.safe_load_all((ROOT / "deploy" / "kubescribe.yaml").read_text())
        if d
    }
    named = []
    for command in shell_commands(block):
        namespace = command[command.index("-n") + 1] if "-n" in command else ""
        for word in command:
            if word.endswith(".yaml"):
                assert (ROOT / word).is_file(), f"docs/install.md: no file {word}"
            elif word.startswith("deploy/"):
                named.append(("Deployment", namespace, word.removeprefix("deploy/")))
            elif word.startswith("--clusterrole="):
                named.append(("ClusterRole", "", word.partition("=")[2]))
            elif word.startswith("--serviceaccount="):
                ns, _, name = word.partition("=")[2].partition(":")
                named.append(("ServiceAccount", ns, name))
    assert len(named) >= 3
    missing = [n for n in named if n not in objects]
    assert not missing, f"docs/install.md names objects deploy/kubescribe.yaml lacks: {missing}"
