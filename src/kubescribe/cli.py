"""`kubescribe run | crds | snapshot | check | version`, and the history: `history | show |
diff | blame | timeline | restore` (also as `kubectl scribe ...`).

Each command imports what it uses when it runs: loading this module declares the commands and
their flags only, so `kubescribe version` and `--help` answer without loading the operator.

Errors are one line on stderr that says what is wrong and how to fix it: exit code 2 for a
usage error (a flag, a value, a command), 1 for one at run time (a kubeconfig, the API server);
`kubescribe --debug ...` adds the traceback. Shell completion is click's:
`eval "$(_KUBESCRIBE_COMPLETE=bash_source kubescribe)"` (zsh_source, fish_source).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from kubescribe import __version__
from kubescribe.cli_history import COMMANDS as HISTORY_COMMANDS
from kubescribe.cli_options import ATTRIBUTION_WAITS, discovery_grace_option, kubeconfig_options
from kubescribe.defaults import (
    CA_VALIDITY,
    CERT_VALIDITY,
    DEFAULT_ADMISSION_CLIENT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_EVENTS,
    MAX_AUDIT_BODY,
)
from kubescribe.store.redis_options import (
    DEFAULT_KEY_PREFIX,
    HMAC_KEY_ENV,
    PASSWORD_ENV,
    URL_ENV,
    RedisOptions,
)

LOG_LEVELS = ("debug", "info", "warning", "error")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"kubescribe: {_one_line(message)}", err=True)
    sys.exit(code)


def _debugging(argv: Sequence[str]) -> bool:
    """`--debug` among the global flags (before the command's name or a `--`)."""
    for arg in argv:
        if arg == "--debug":
            return True
        if arg == "--" or not arg.startswith("-"):
            return False
    return False


def describe(exc: BaseException) -> str:
    """One line for an error at run time: what failed and what to do about it. The modules
    of the exceptions are only looked at when already loaded (start-up stays light)."""
    from_config = sys.modules.get("kubescribe.kube.config")
    if from_config is not None and isinstance(exc, from_config.ConfigError):
        return str(exc)
    client = sys.modules.get("kubescribe.kube.client")
    if client is not None and isinstance(exc, client.ApiError):
        hint = {
            401: "the credentials were refused: check the kubeconfig's user (or --context)",
            403: "the user may not do this: check its RBAC",
        }.get(exc.status, "see the API server's message")
        return f"the API server answered {exc}; {hint}"
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return (
                f"the API server at {exc.host}:{exc.port} presented a certificate that is not "
                "trusted; check certificate-authority in the kubeconfig"
            )
        if isinstance(exc, aiohttp.ClientConnectorError):
            return (
                f"cannot reach the API server at {exc.host}:{exc.port} "
                f"({os.strerror(exc.errno) if exc.errno else exc.os_error}); "
                "check the kubeconfig's server (or --context) and that the cluster is up"
            )
        if isinstance(exc, aiohttp.ClientError):
            return f"the API server connection failed ({exc.__class__.__name__}: {exc})"
    if isinstance(exc, TimeoutError):
        return "the API server did not answer in time; check the network and the cluster"
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}:{where}"
    return (
        f"{exc.__class__.__name__}: {exc} (a bug: rerun with `kubescribe --debug` and report "
        "the traceback)"
    )


class _Commands(click.Group):
    """Runs the command line with every error turned into one line (see the module doc)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        debug = _debugging(argv)
        try:
            code = super().main(
                argv,
                prog_name or "kubescribe",
                complete_var,
                standalone_mode=False,
                **extra,
            )
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "kubescribe"
            _fail(f"{exc.format_message()} (see '{where} --help')", exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort:
            sys.exit(130)
        except Exception as exc:
            if debug:
                traceback.print_exc()
            _fail(describe(exc), 1)
        sys.exit(code if isinstance(code, int) else 0)


def _debug_flag(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    return value  # read from argv by _Commands.main, which must know before parsing fails


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", prog_name="kubescribe", message="%(prog)s %(version)s"
)
@click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    callback=_debug_flag,
    help="Print the traceback of an error (before the command: kubescribe --debug run ...).",
)
def main() -> None:
    """kubescribe keeps a Git repository as a clean mirror of the Kubernetes API.

    \b
    Kubeconfig: --kubeconfig, else $KUBECONFIG (files merged as kubectl does), else
    ~/.kube/config, else the in-cluster service account; --context picks a context.
    Shell completion: eval "$(_KUBESCRIBE_COMPLETE=bash_source kubescribe)"
    (zsh_source, fish_source).
    """


def _address(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """host:port ('' = off), as the listeners take it: [v6]:port, or :port for every address."""
    if not value:
        return value
    host, sep, port = value.rpartition(":")
    ok = bool(sep) and port.isdigit() and 0 <= int(port) <= 65535
    if ok and host.startswith("["):
        ok = host.endswith("]") and ":" in host
    elif ok:
        ok = ":" not in host and " " not in host
    if not ok:
        raise click.BadParameter(
            f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8080, :8080 or [::1]:8080; '' turns "
            "it off)"
        )
    return value


def _age_recipients(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    if not value:
        return value
    from kubescribe.secrets.age import check_recipient  # noqa: PLC0415

    for recipient in value:
        try:
            check_recipient(recipient)
        except ValueError:
            raise click.BadParameter(
                f"{recipient!r} is not an age X25519 public key (age1...; `age-keygen -y KEYFILE` "
                "prints yours)"
            ) from None
    return value


@main.command()
def version() -> None:
    """Print the version."""
    click.echo(f"kubescribe {__version__}")


@main.command()
def crds() -> None:
    """Print the CustomResourceDefinitions (multi-document YAML, for kubectl apply -f -)."""
    from kubescribe.api.crds import render_crds  # noqa: PLC0415

    click.echo(render_crds(), nl=False)


def _attribution_options(command: Callable[..., None]) -> Callable[..., None]:
    """`kubescribe run` flags of audit attribution and the CommitRequest admission webhook."""
    path = click.Path(exists=True, dir_okay=False, path_type=Path)
    options = [
        click.option(
            "--audit-addr",
            default="",
            callback=_address,
            help="host:port of the HTTPS audit webhook receiver ('' = off).",
        ),
        click.option(
            "--audit-tls-cert", type=path, help="Serving certificate (PEM) of the audit receiver."
        ),
        click.option("--audit-tls-key", type=path, help="Its private key (PEM)."),
        click.option(
            "--audit-client-ca",
            type=path,
            help="CA (PEM) that signs kube-apiserver's audit client certificate.",
        ),
        click.option(
            "--audit-route",
            default="local",
            show_default=True,
            help="Route of this cluster: the apiserver posts to /audit-webhook/<route>. Only a "
            "client certificate named kubescribe-audit-<route> (CN or DNS/URI SAN) may post; "
            "`name=id1,id2` names others, `name=*` accepts any the client CA signs.",
        ),
        click.option(
            "--audit-extra-route",
            "audit_extra_routes",
            multiple=True,
            help="More accepted routes (other clusters; their facts are kept apart), same "
            "syntax. Repeatable.",
        ),
        click.option(
            "--audit-max-body",
            type=click.IntRange(min=1024, max=MAX_AUDIT_BODY),
            default=DEFAULT_MAX_BODY,
            show_default=True,
            help="Largest audit batch in bytes (413 beyond; a body that could decode to more "
            "than 64 MiB is refused too).",
        ),
        click.option(
            "--audit-max-events",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_EVENTS,
            show_default=True,
            help="Most events in one audit batch (413 beyond).",
        ),
        *ATTRIBUTION_WAITS,
        click.option(
            "--redis-url",
            envvar=URL_ENV,
            default="",
            help="Share audit facts, CommitRequest authors and watch resume cursors through Redis "
            f"('' = in memory; rediss:// for TLS). Defaults to ${URL_ENV}. The password comes "
            f"from ${PASSWORD_ENV}; ${HMAC_KEY_ENV} (at least 32 bytes, the same for every "
            "replica) is required and signs every entry.",
        ),
        click.option(
            "--redis-ca-file",
            type=path,
            help="CA (PEM) that signs the Redis server's certificate (rediss://; default: the "
            "system CAs).",
        ),
        click.option(
            "--redis-key-prefix",
            default=DEFAULT_KEY_PREFIX,
            show_default=True,
            help="Prefix of every Redis key, so several installs can share one Redis.",
        ),
        click.option(
            "--webhook-addr",
            default="",
            callback=_address,
            help="host:port of the HTTPS admission webhook that records CommitRequest "
            "authors ('' = off).",
        ),
        click.option(
            "--webhook-tls-cert",
            type=path,
            help="Serving certificate (PEM) of the admission webhook.",
        ),
        click.option("--webhook-tls-key", type=path, help="Its private key (PEM)."),
        click.option(
            "--changes-webhook-url",
            default="",
            help="https URL at which kube-apiserver reaches this operator's /validate-changes: "
            "register a ValidatingWebhookConfiguration for the watched types and name commit "
            "authors from it (attribution without audit; managed clusters).",
        ),
        click.option(
            "--changes-webhook-ca",
            type=path,
            help="CA (PEM) of the webhook's serving certificate, for the registration's caBundle.",
        ),
        click.option(
            "--changes-webhook-name",
            default="kubescribe-attribution",
            show_default=True,
            help="Name of that ValidatingWebhookConfiguration: one per install (the chart: "
            "<release>-attribution).",
        ),
        click.option(
            "--webhook-allow-anonymous",
            is_flag=True,
            help="Accept admission reviews without a client certificate: for managed clusters, "
            "whose API server cannot present one. Anyone reaching the port can then post facts: "
            "limit it to the API server with a NetworkPolicy (docs/security.md).",
        ),
        click.option(
            "--webhook-client-ca",
            type=path,
            help="CA (PEM) that signs kube-apiserver's admission client certificate "
            "(required with --webhook-addr).",
        ),
        click.option(
            "--webhook-client-cn",
            "webhook_client_cns",
            multiple=True,
            default=(DEFAULT_ADMISSION_CLIENT,),
            show_default=True,
            help="Client certificate CN or DNS/URI SAN allowed to call the admission webhook "
            "('*' = any the CA signs). Repeatable.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _certificate_options(command: Callable[..., None]) -> Callable[..., None]:
    """`kubescribe run` flags of operator-managed webhook certificates."""
    options = [
        click.option(
            "--webhook-cert-secret",
            default="",
            help="Manage the certificates of the audit receiver and the admission webhook in "
            "this Secret (created when missing, serving certificate renewed at 2/3 of its "
            "life, CA rolled over with an overlap) instead of --*-tls-cert/--*-client-ca files.",
        ),
        click.option(
            "--webhook-cert-namespace",
            envvar="POD_NAMESPACE",
            default="default",
            show_default=True,
            help="Namespace of --webhook-cert-secret and --apiserver-config-secret. Defaults "
            "to $POD_NAMESPACE.",
        ),
        click.option(
            "--webhook-cert-host",
            "webhook_cert_hosts",
            multiple=True,
            help="DNS name or IP address of the serving certificate. Repeatable.",
        ),
        click.option(
            "--webhook-cert-validity",
            type=click.FloatRange(min=10),
            default=CERT_VALIDITY,
            show_default=True,
            help="Seconds the serving certificate is valid (renewed at 2/3).",
        ),
        click.option(
            "--webhook-ca-validity",
            type=click.FloatRange(min=60),
            default=CA_VALIDITY,
            show_default=True,
            help="Seconds the CA is valid (next CA staged at 2/3, signing at 5/6).",
        ),
        click.option(
            "--webhook-cert-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=Path("/tmp/kubescribe-webhook-tls"),
            show_default=True,
            help="Where the served certificate files are written (tls.crt, tls.key, ca.crt).",
        ),
        click.option(
            "--webhook-ca-inject",
            "webhook_ca_inject",
            multiple=True,
            help="ValidatingWebhookConfiguration whose caBundle is kept equal to the trusted "
            "CAs. Repeatable.",
        ),
        click.option(
            "--apiserver-config-secret",
            default="",
            help="Also keep kube-apiserver's files (client certificates, kubeconfigs) in this "
            "Secret, for the cluster administrator.",
        ),
        click.option(
            "--apiserver-files",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            help="Folder whose files (audit policy, AdmissionConfiguration) are copied into "
            "--apiserver-config-secret.",
        ),
        click.option(
            "--audit-webhook-url",
            default="",
            help="The receiver's URL in the audit-webhook.kubeconfig of --apiserver-config-secret.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@main.command()
@kubeconfig_options
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path),
    default=Path("/tmp/kubescribe-cache"),
    show_default=True,
    help="Object cache for Git (never trusted as state).",
)
@click.option(
    "--cache-quota-per-namespace",
    "cache_quota",
    default="0",
    show_default=True,
    help="Bytes each namespace's Git clones may hold in the cache, e.g. 256Mi or 1G (0 = no "
    "quota); a fetch or write past it refuses the target (CacheQuotaExceeded).",
)
@click.option(
    "--metrics-addr",
    default="127.0.0.1:8080",
    show_default=True,
    callback=_address,
    help="host:port for /metrics, /healthz and /readyz ('' to disable).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="info",
    show_default=True,
)
@click.option(
    "--allow-file-urls",
    is_flag=True,
    help="Allow GitProviders with file:// or local-path URLs (tests and demos only: such a "
    "URL lets any GitProvider author write to the operator's own file system).",
)
@click.option(
    "--deny-private-networks",
    is_flag=True,
    help="Refuse Git remotes at private, loopback, CGNAT, ULA or otherwise non-public "
    "addresses, and cluster-local names (*.cluster.local, *.svc, single labels), checked "
    "on every probe, fetch and push.",
)
@click.option(
    "--probe-interval",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Seconds between probes of each GitProvider's remote (also probed on every change).",
)
@click.option(
    "--no-cross-namespace-sources",
    is_flag=True,
    help="Lockdown: refuse every WatchRule sourceNamespace other than the rule's own, whatever "
    "the Namespaces grant (and do not watch Namespaces).",
)
@click.option(
    "--tenant-service-account",
    default="",
    metavar="NAME",
    help="A WatchRule mirrors only the types that the ServiceAccount NAME of its own namespace "
    "may list and watch (checked with SubjectAccessReviews); others are RuleNotAuthorized. "
    "'' (default) lends the operator's own read access to every WatchRule.",
)
@click.option(
    "--allow-insecure-cluster-tls",
    is_flag=True,
    help="Accept ClusterProvider kubeconfigs with insecure-skip-tls-verify or an http:// server.",
)
@click.option(
    "--replica-id",
    envvar="POD_NAME",
    default="",
    help="Share the work with other replicas through Leases, as this replica ('' = a single "
    "replica that writes everything). Defaults to $POD_NAME.",
)
@click.option(
    "--lease-namespace",
    envvar="POD_NAMESPACE",
    default="default",
    show_default=True,
    help="Namespace of the membership and writer Leases. Defaults to $POD_NAMESPACE.",
)
@click.option(
    "--lease-duration",
    type=click.FloatRange(min=2),
    default=10.0,
    show_default=True,
    help="Seconds after which a replica that stopped renewing its Leases is replaced.",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=1),
    default=8.0,
    show_default=True,
    help="Seconds from SIGTERM to released Leases: writers push what they hold, cursors are "
    "saved (keep it a few seconds under the Pod's terminationGracePeriodSeconds).",
)
@click.option(
    "--kustomize",
    "kustomize_binary",
    envvar="KUBESCRIBE_KUSTOMIZE",
    default="",
    help="The kustomize binary for GitTargets with `kustomize.renderCheck` (default: "
    "`kustomize` on PATH; without one, such targets report RenderMatchesLive=Unknown / "
    "RenderCheckUnavailable and are still written).",
)
@click.option(
    "--owner-cluster-role",
    default="",
    metavar="NAME",
    help="Give what the operator creates cluster-wide (the change webhook's "
    "ValidatingWebhookConfiguration) an ownerReference to the ClusterRole NAME, so that the "
    "garbage collector deletes it with the ClusterRole (the chart: its own, on helm "
    "uninstall). '' = no owner.",
)
@discovery_grace_option
@_attribution_options
@_certificate_options
def run(
    kubeconfig: str | None,
    context: str | None,
    cache_dir: Path,
    cache_quota: str,
    metrics_addr: str,
    log_level: str,
    allow_file_urls: bool,
    deny_private_networks: bool,
    probe_interval: float,
    discovery_grace: float,
    no_cross_namespace_sources: bool,
    tenant_service_account: str,
    allow_insecure_cluster_tls: bool,
    replica_id: str,
    lease_namespace: str,
    lease_duration: float,
    shutdown_timeout: float,
    kustomize_binary: str,
    owner_cluster_role: str,
    webhook_cert_secret: str,
    webhook_cert_namespace: str,
    webhook_cert_hosts: tuple[str, ...],
    webhook_cert_validity: float,
    webhook_ca_validity: float,
    webhook_cert_dir: Path,
    webhook_ca_inject: tuple[str, ...],
    apiserver_config_secret: str,
    apiserver_files: Path | None,
    audit_webhook_url: str,
    **attribution: Any,
) -> None:
    """Run the operator until SIGTERM/SIGINT; pending writes are flushed on the way out."""
    # Flags are checked and the API server asked first, before the operator is loaded: a wrong
    # flag or kubeconfig costs a fraction of a second. What only some configurations use (Redis,
    # managed certificates, encryption) is imported further down, where it is configured.
    import asyncio  # noqa: PLC0415

    from kubescribe.git.quota import parse_size  # noqa: PLC0415
    from kubescribe.server.attribution import AttributionOptions  # noqa: PLC0415

    attribution["redis"] = _redis_options(
        attribution.pop("redis_url"),
        attribution.pop("redis_ca_file"),
        attribution.pop("redis_key_prefix"),
    )
    attribution_options = AttributionOptions(**attribution)
    if webhook_cert_secret:
        from kubescribe.app import MANAGED_FILES  # noqa: PLC0415

        given = [f for f in MANAGED_FILES if getattr(attribution_options, f) is not None]
        if given:
            flags = ", ".join("--" + f.replace("_", "-") for f in given)
            raise click.UsageError(f"--webhook-cert-secret manages the certificates: drop {flags}")
        if not webhook_cert_hosts:
            raise click.UsageError("--webhook-cert-secret needs --webhook-cert-host")
    if not webhook_cert_secret and (problems := attribution_options.problems()):
        raise click.UsageError("; ".join(problems))
    try:
        quota = parse_size(cache_quota)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cache-quota-per-namespace") from None
    kustomize = shutil.which(kustomize_binary or "kustomize")
    if kustomize_binary and kustomize is None:
        raise click.BadParameter(
            f"{kustomize_binary} is not an executable file", param_hint="--kustomize"
        )
    from kubescribe.git.transport.proxy import ProxyConfigError, process_settings  # noqa: PLC0415

    try:  # read again for every Git transfer; refused here rather than at the first one
        proxies = process_settings()
    except ProxyConfigError as exc:
        raise click.UsageError(str(exc)) from None
    asyncio.run(_reach_api_server(kubeconfig, context))

    import structlog  # noqa: PLC0415

    from kubescribe import logs  # noqa: PLC0415
    from kubescribe.app import Sharing, managed_certificates, run_operator  # noqa: PLC0415
    from kubescribe.git.repo import limit_libgit2_memory  # noqa: PLC0415
    from kubescribe.git.sandbox import confine_libgit2, network_isolation  # noqa: PLC0415
    from kubescribe.net.addresses import NetworkPolicy, set_network_policy  # noqa: PLC0415
    from kubescribe.stopping import Stopper  # noqa: PLC0415

    logs.configure(log_level)
    if proxy_settings := proxies.describe():
        structlog.get_logger(__name__).info("git.proxy", **proxy_settings)
    set_network_policy(NetworkPolicy(deny_private=deny_private_networks))
    limit_libgit2_memory()
    confine_libgit2()  # no .gitconfig outside a repository is read (docs/security.md)
    certificates = None
    if webhook_cert_secret:
        from kubescribe.controller.certrotation import Policy  # noqa: PLC0415
        from kubescribe.controller.webhookcerts import CertificateOptions  # noqa: PLC0415

        attribution_options, certificates = managed_certificates(
            attribution_options,
            CertificateOptions(
                namespace=webhook_cert_namespace,
                secret=webhook_cert_secret,
                policy=Policy(
                    serving_validity=dt.timedelta(seconds=webhook_cert_validity),
                    ca_validity=dt.timedelta(seconds=webhook_ca_validity),
                    hosts=webhook_cert_hosts,
                ),
                directory=webhook_cert_dir,
                inject=webhook_ca_inject,
                apiserver_secret=apiserver_config_secret,
                apiserver_files=apiserver_files,
                audit_url=audit_webhook_url,
            ),
        )
        if problems := attribution_options.problems():
            raise click.UsageError("; ".join(problems))
    if kustomize and not network_isolation():
        # Remote references are still refused before kustomize runs, and it has no `git`.
        structlog.get_logger(__name__).warning(
            "render_check.network_not_isolated", reason="unshare --net is refused here"
        )
    stopper = Stopper(shutdown_timeout)
    operator = run_operator(
        Path(kubeconfig) if kubeconfig else None,
        context,
        cache_dir,
        metrics_addr,
        allow_file_urls=allow_file_urls,
        probe_interval=probe_interval,
        discovery_grace=discovery_grace,
        cross_namespace_sources=not no_cross_namespace_sources,
        tenant_service_account=tenant_service_account,
        allow_insecure_cluster_tls=allow_insecure_cluster_tls,
        kustomize=kustomize,
        cache_quota=quota,
        sharing=Sharing(replica_id, lease_namespace, lease_duration),
        owner_cluster_role=owner_cluster_role,
        attribution_options=attribution_options,
        certificates=certificates,
        stopper=stopper,
    )
    asyncio.run(stopper.run(operator))
    stopper.end()


@main.command()
@kubeconfig_options
@click.option(
    "--namespace",
    default=None,
    help="Where the operator runs (default: found by its label in every namespace); "
    "GitProviders, GitTargets and rules are checked in every namespace.",
)
@click.option(
    "--operator-url",
    default=None,
    help="Read the metrics of an operator run as a process here (e.g. http://127.0.0.1:8080) "
    "instead of through the API server from its Pods.",
)
@click.option(
    "--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def check(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    operator_url: str | None,
    output: str,
) -> None:
    """Check the whole install: one line per check, the fix under each failure; exit 1 when
    anything fails."""
    import asyncio  # noqa: PLC0415

    from kubescribe import __version__  # noqa: PLC0415
    from kubescribe.checkup.gather import gather  # noqa: PLC0415
    from kubescribe.checkup.verdicts import (  # noqa: PLC0415
        Verdict,
        as_json,
        failed,
        table,
        verdicts,
    )
    from kubescribe.kube.client import KubeClient  # noqa: PLC0415

    async def read() -> list[Verdict]:
        client = await KubeClient.connect(kubeconfig, context)
        try:
            facts = await gather(
                client, namespace=namespace, operator_url=operator_url, version=__version__
            )
        finally:
            await client.close()
        return verdicts(facts)

    found = asyncio.run(read())
    click.echo(as_json(found) if output == "json" else table(found))
    raise SystemExit(1 if failed(found) else 0)


@main.command()
@kubeconfig_options
@click.option(
    "--repo",
    "repo_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Local Git repository (created when missing).",
)
@click.option("--branch", default="main", show_default=True)
@click.option(
    "--path", "folder", default=".", show_default=True, help="Folder inside the repository."
)
@click.option(
    "--resource",
    "resources",
    multiple=True,
    help="RESOURCE or GROUP/RESOURCE (core/ for the core group), globs allowed; repeatable. "
    "Default: every listable type.",
)
@click.option(
    "--namespace", default="", help="Only this namespace (cluster-scoped types are skipped)."
)
@click.option("--selector", default=None, help="Label selector, e.g. app=web,tier!=cache.")
@click.option(
    "--content",
    type=click.Choice(["Owned", "Full"]),
    default="Owned",
    show_default=True,
    help="What each document holds, as a GitTarget's spec.content.mode (docs/content.md).",
)
@click.option(
    "--age-recipient",
    "recipients",
    multiple=True,
    metavar="AGE1...",
    callback=_age_recipients,
    help="Write Secrets SOPS-encrypted to this age public key (repeatable). Without one, "
    "Secrets are skipped: a snapshot never writes one in plain text.",
)
def snapshot(
    kubeconfig: str | None,
    context: str | None,
    repo_dir: Path,
    branch: str,
    folder: str,
    resources: tuple[str, ...],
    namespace: str,
    selector: str | None,
    content: str,
    recipients: tuple[str, ...],
) -> None:
    """Export the selected objects into a Git repository once (brownfield onboarding).

    Secrets are skipped (and counted on stderr) unless --age-recipient is given: then they are
    written SOPS-encrypted, as a GitTarget with encryption writes them.
    """
    import asyncio  # noqa: PLC0415

    from kubescribe import logs  # noqa: PLC0415
    from kubescribe.api.gittarget import CONTROLLER_MANAGERS  # noqa: PLC0415
    from kubescribe.controller.snapshot import (  # noqa: PLC0415
        Exported,
        Selection,
        SnapshotError,
        run_snapshot,
        select_types,
    )
    from kubescribe.git.targets import Committer  # noqa: PLC0415
    from kubescribe.kube.client import KubeClient  # noqa: PLC0415
    from kubescribe.kube.discovery import Discovered  # noqa: PLC0415
    from kubescribe.mirror.owned import Content  # noqa: PLC0415

    logs.configure("warning")
    selection = Selection(resources, namespace, selector)

    async def export() -> Exported:
        client = await KubeClient.connect(kubeconfig, context)
        try:
            types = await select_types(client, selection)
            with click.progressbar(length=len(types), label="exporting", show_pos=True) as bar:

                def advance(item: Discovered) -> None:
                    bar.label = item.rtype.gvr
                    bar.update(1)

                return await run_snapshot(
                    client,
                    repo_dir,
                    selection,
                    types,
                    branch=branch,
                    folder=folder,
                    committer=Committer("kubescribe", "kubescribe@users.noreply.local"),
                    progress=advance,
                    content=Content(content, CONTROLLER_MANAGERS),
                    recipients=recipients,
                )
        finally:
            await client.close()

    try:
        exported = asyncio.run(export())
    except SnapshotError as exc:
        raise click.ClickException(str(exc)) from None
    tip = exported.tip
    click.echo(f"{repo_dir}: {branch} at {tip}" if tip else f"{repo_dir}: nothing to write")
    if exported.refused and not recipients:
        count = len(exported.refused)
        click.echo(
            f"kubescribe: skipped {count} Secret{'s' if count != 1 else ''} (never written in "
            "plain text); add --age-recipient AGE1... to write them SOPS-encrypted",
            err=True,
        )
    elif exported.refused:
        message = exported.refused[0].message
        more = f" (and {len(exported.refused) - 1} more)" if len(exported.refused) > 1 else ""
        raise click.ClickException(f"{message}{more}")


def kubectl_plugin() -> None:
    """`kubectl scribe ...`: the same commands, found by kubectl as `kubectl-scribe` on PATH."""
    main(prog_name="kubectl scribe")


async def _reach_api_server(kubeconfig: str | None, context: str | None) -> None:
    """Read the kubeconfig and ask the API server its version once, so that a wrong kubeconfig,
    context, address or credential ends `run` at once with one line (exit code 1)."""
    from kubescribe.kube.client import KubeClient  # noqa: PLC0415

    client = await KubeClient.connect(kubeconfig, context)
    try:
        await client.get("/version", timeout=15)
    finally:
        await client.close()


def _redis_options(url: str, ca_file: Path | None, key_prefix: str) -> RedisOptions | None:
    """Redis settings, with the secrets from the environment (never from arguments)."""
    if not url:
        return None
    return RedisOptions(
        url=url,
        hmac_key=os.environ.get(HMAC_KEY_ENV, "").encode(),
        password=os.environ.get(PASSWORD_ENV, ""),
        ca_file=ca_file,
        key_prefix=key_prefix,
    )


if __name__ == "__main__":
    main()


for _command in HISTORY_COMMANDS:
    main.add_command(_command)
