"""Command line: `wattprobe serve`, `wattprobe check`, `wattprobe top`, `wattprobe report`.

Every flag also reads WATTPROBE_<NAME> (dots and dashes become underscores), e.g.
--web.listen-address <- WATTPROBE_WEB_LISTEN_ADDRESS.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from exporter import __version__
from exporter.app.agent import Agent
from exporter.app.check import exit_status, run_checks
from exporter.app.check.report import report, text_lines
from exporter.app.check.warnings import config_warnings
from exporter.app.cli import logformat
from exporter.app.cli.kube import kube_options
from exporter.app.cli.showback import load_showback, showback_of, showback_options
from exporter.app.progress import progress_for
from exporter.app.registry import REGISTRY, Registry
from exporter.app.runtime import tune_for_serving
from exporter.app.wiring import StartupError
from exporter.exposition.showback_live import LiveShowback
from exporter.model.config import (
    DEFAULT_PORT,
    INTERVAL_RANGE,
    RETENTION_RANGE,
    TIMEOUT_RANGE,
    ActivitySource,
    Config,
    GpuIoctls,
    HttpLimits,
    IdleAttribution,
    IdlePower,
    bounded_duration,
    parse_duration,
    parse_listen_address,
)
from exporter.web.config import WebConfigError
from exporter.web.listen import format_address, listen_problem
from exporter.web.live import LiveWebConfig

log = logging.getLogger("wattprobe")

SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)

F = TypeVar("F", bound=Callable[..., Any])


def _env(flag: str) -> str:
    return "WATTPROBE_" + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def _option(flag: str, dest: str, **kwargs: Any) -> Callable[[F], F]:
    return click.option(
        flag, dest, envvar=_env(flag), show_envvar=True, show_default=True, **kwargs
    )


def _converter(parse: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that turns a parser's ValueError into a one-line BadParameter."""

    def convert(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return convert


# Every numeric flag has a range, and a value outside it (inf, nan, negative, absurd) is one
# line at start-up, never an agent that serves NaN energy (--estimate.max-watts inf did) or lets
# a client hold a terabyte header (--web.max-header-bytes 1e12 was accepted). Issue 41.
# A node's CPU power at full load: the largest two-socket servers draw about 1 kW; 10 kW is
# far past any one node and still a number the meter's plausibility gate can use.
MAX_ESTIMATE_WATTS = 10_000.0
MAX_CONNECTIONS = 1_000_000  # each costs a descriptor and ~4 KiB: past this, memory, not slots
MAX_REQUESTS = 100_000
# Go's http.DefaultMaxHeaderBytes: a scrape's head is ~300 bytes, a proxy's headers a few KiB
MAX_HEADER_BYTES = 1 << 20


def _watts(maximum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number of watts") from None
        if not (math.isfinite(value) and 0 <= value <= maximum):
            raise ValueError(f"{text!r} is out of range: 0 to {maximum:g} W")
        return value

    return parse


def _count(text: str) -> int:
    if not text.strip().isascii() or not text.strip().isdigit():
        raise ValueError(f"{text!r} is not a whole number")
    return int(text)


def _count_in(minimum: int, maximum: int, why: str = "") -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _count(text[:32])  # a thousand digits is not a count: no huge int() either
        if len(text.strip()) > 32 or not minimum <= value <= maximum:
            because = f" ({why})" if why and value < minimum else ""
            raise ValueError(f"{text[:32]!r} is out of range: {minimum} to {maximum}{because}")
        return value

    return parse


# A Prometheus scrape's request head is about 300 bytes; 1 KiB leaves room for a proxy's headers.
MIN_HEADER_BYTES = 1024
# Paths the server answers besides the metrics: the telemetry path must not hide one of them.
OTHER_PATHS = ("/", "/healthz", "/readyz")


def _telemetry_path(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError("must start with '/'")
    if not text.isascii() or not text.isprintable() or any(c in text for c in " ?#"):
        raise ValueError(f"{text!r} cannot be a request path (spaces, '?', '#' or non-ASCII)")
    if text in OTHER_PATHS:
        raise ValueError(f"{text} would hide the server's own {text} page; choose another path")
    return text


def _zone_list(text: str) -> tuple[str, ...]:
    return tuple(z.strip() for z in text.split(",") if z.strip())


def source_options(func: F) -> F:
    """Flags that decide what is read and how: shared by serve and check."""
    opts = [
        _option(
            "--path.procfs",
            "procfs",
            default="/proc",
            type=click.Path(path_type=Path),
            help="procfs mount point",
        ),
        _option(
            "--path.sysfs",
            "sysfs",
            default="/sys",
            type=click.Path(path_type=Path),
            help="sysfs mount point",
        ),
        _option(
            "--path.cgroupfs",
            "cgroupfs",
            default=None,
            type=click.Path(path_type=Path),
            help="cgroup mount root [default: <sysfs>/fs/cgroup]",
        ),
        click.option(
            "--activity.source",
            # the first name, kept as an alias; the dotted one matches the other flags
            "--activity-source",
            "activity_source",
            envvar=_env("--activity.source"),  # WATTPROBE_ACTIVITY_SOURCE, as before
            show_envvar=True,
            show_default=True,
            default="auto",
            type=click.Choice([a.value for a in ActivitySource]),
            help="what measures per-task CPU time: auto, ebpf or procfs",
        ),
        _option(
            "--ebpf.kernel-headers",
            "ebpf_kernel_headers",
            default=None,
            type=click.Path(path_type=Path),
            help="kernel headers for the eBPF probes when the running kernel's are not "
            "installed [default: a generic set under /usr/src]",
        ),
        _option(
            "--ebpf.gpu-ioctls",
            "ebpf_gpu_ioctls",
            default="auto",
            type=click.Choice([g.value for g in GpuIoctls]),
            help="count GPU driver ioctls with eBPF (a syscall tracepoint: every syscall pays a "
            "little): auto = when /dev has NVIDIA or DRM device nodes",
        ),
        _option(
            "--estimate.idle-watts",
            "estimate_idle_w",
            default=None,
            callback=_converter(_watts(MAX_ESTIMATE_WATTS)),
            help="estimated node CPU power at idle [default: from the CPU or instance type]",
        ),
        _option(
            "--estimate.max-watts",
            "estimate_max_w",
            default=None,
            callback=_converter(_watts(MAX_ESTIMATE_WATTS)),
            help="estimated node CPU power at full load [default: from the CPU or instance type]",
        ),
        _option(
            "--estimate.instance-type",
            "estimate_instance_type",
            default="",
            help="the node's cloud instance type (its node.kubernetes.io/instance-type label, "
            "e.g. m5.xlarge): the estimate then uses the host's CPU [default: the DMI product "
            "name when it is one, else the CPU model]",
        ),
        _option(
            "--log.level",
            "log_level",
            default="info",
            type=click.Choice(["debug", "info", "warn", "error"]),
            help="log level",
        ),
        _option(
            "--log.format",
            "log_format",
            default=logformat.PLAIN,
            type=click.Choice(logformat.FORMATS),
            help="log line format: plain (for people), logfmt or json (for log shippers)",
        ),
    ]
    opts += collector_flags(REGISTRY)
    for opt in reversed(opts):
        func = opt(func)
    return func


def collector_flags(registry: Registry) -> list[Callable[[F], F]]:
    """--collector.NAME/--no-collector.NAME for every switchable source in the registry."""
    aliases = registry.collector_aliases
    return [
        click.option(
            f"--collector.{name}/--no-collector.{name}",
            *(f"--collector.{a}/--no-collector.{a}" for a in aliases.get(name, ())),
            f"collector_{name}",
            default=on,
            envvar=[_env(f"collector.{n}") for n in (name, *aliases.get(name, ()))],
            show_envvar=True,
            show_default=True,
            help=registry.collector_help(name),
        )
        for name, on in sorted(registry.collector_defaults.items())
    ]


def collectors_of(kw: dict[str, Any], registry: Registry = REGISTRY) -> frozenset[str]:
    """The collectors switched on, taking their collector_NAME values out of kw."""
    return frozenset(n for n in registry.collector_defaults if kw.pop(f"collector_{n}"))


def web_options(func: F) -> F:
    """--web.config.file and the HTTP server's limits (docs/security.md)."""
    limits = HttpLimits()
    opts = [
        _option(
            "--web.config.file",
            "web_config_file",
            default=None,
            type=click.Path(path_type=Path, dir_okay=False),
            help="TLS and basic auth config in the exporter-toolkit format",
        ),
        _option(
            "--web.max-connections",
            "web_max_connections",
            default=str(limits.max_connections),
            callback=_converter(_count_in(1, MAX_CONNECTIONS, "0 would refuse every connection")),
            help="open connections at once (a memory bound); more are refused with 503",
        ),
        _option(
            "--web.max-requests",
            "web_max_requests",
            default=str(limits.max_requests),
            callback=_converter(_count_in(0, MAX_REQUESTS)),
            help="scrapes waiting for a render at once; more get 503 (0: no limit)",
        ),
        _option(
            "--web.read-header-timeout",
            "web_header_timeout_s",
            default=f"{limits.header_timeout_s:g}s",
            callback=_converter(bounded_duration(TIMEOUT_RANGE)),
            help="time a client has to send a request's headers (and do its TLS handshake)",
        ),
        _option(
            "--web.idle-timeout",
            "web_idle_timeout_s",
            default=f"{limits.idle_timeout_s:g}s",
            callback=_converter(bounded_duration(TIMEOUT_RANGE)),
            help="how long an idle keep-alive connection stays open",
        ),
        _option(
            "--web.write-timeout",
            "web_write_timeout_s",
            default=f"{limits.write_timeout_s:g}s",
            callback=_converter(bounded_duration(TIMEOUT_RANGE)),
            help="time a client has to take a response",
        ),
        _option(
            "--web.max-header-bytes",
            "web_max_header_bytes",
            default=str(limits.max_header_bytes),
            callback=_converter(
                _count_in(
                    MIN_HEADER_BYTES,
                    MAX_HEADER_BYTES,
                    "a scrape's request line and headers must fit",
                )
            ),
            help="largest request head (request line and headers) accepted",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def attribution_options(func: F) -> F:
    """How energy is split: shared by serve and top (which measures the way serve does)."""
    opts = [
        _option(
            "--power.idle",
            "power_idle",
            default="auto",
            callback=_converter(IdlePower.parse),
            help="idle power per zone: auto (learned), WATTS, or ZONE=WATTS,...",
        ),
        _option(
            "--attribution.idle",
            "attribution_idle",
            default="holders",
            type=click.Choice([a.value for a in IdleAttribution]),
            help="idle energy: holders (a GPU's to the pods holding it), none (stays on the "
            "node), requests, activity",
        ),
        _option(
            "--attribution.zones",
            "attribution_zones",
            default="",
            callback=_converter(_zone_list),
            help="zones split among workloads [default: package,dram with RAPL; else hwmon or "
            "estimate]",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def _config(**kw: Any) -> Config:
    collectors = collectors_of(kw)
    kw["activity_source"] = ActivitySource(kw["activity_source"])
    kw["ebpf_gpu_ioctls"] = GpuIoctls(kw["ebpf_gpu_ioctls"])
    if "attribution_idle" in kw:
        kw["attribution_idle"] = IdleAttribution(kw["attribution_idle"])
    if "listen_address" in kw:
        kw["listen_host"], kw["listen_port"] = kw.pop("listen_address")
    return Config(collectors=collectors, **kw)


def _setup_logging(level: str, log_format: str = logformat.PLAIN) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logformat.formatter(log_format))
    logging.basicConfig(
        level={"warn": logging.WARNING}.get(level, getattr(logging, level.upper())),
        handlers=[handler],
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="wattprobe")
def cli() -> None:
    """wattprobe: node power and GPU exporter with energy attributed to pods."""


@cli.command()
@_option(
    "--web.listen-address",
    "listen_address",
    default=f":{DEFAULT_PORT}",
    callback=_converter(parse_listen_address),
    help="address to serve /metrics on",
)
@_option(
    "--web.telemetry-path",
    "telemetry_path",
    default="/metrics",
    callback=_converter(_telemetry_path),
    help="path of the metrics",
)
@_option(
    "--interval",
    "interval_s",
    default="5s",
    callback=_converter(bounded_duration(INTERVAL_RANGE)),
    help="attribution interval",
)
@_option(
    "--source.timeout",
    "source_timeout_s",
    default="auto",
    callback=_converter(
        lambda t: None if t.strip() in ("", "auto") else bounded_duration(TIMEOUT_RANGE)(t)
    ),
    help="how long an interval waits for a source's read; a source that takes longer is "
    "reported as timed out and not read again until its read returns [auto: half the "
    "interval, at least 1s]",
)
@attribution_options
@_option(
    "--workload.retention",
    "retention_s",
    default="10m",
    callback=_converter(bounded_duration(RETENTION_RANGE)),
    help="how long series of terminated containers and processes stay",
)
@kube_options
@web_options
@showback_options
@source_options
def serve(**kw: Any) -> None:
    """Serve /metrics for Prometheus."""
    if not kw["node_name"]:
        kw.pop("node_name")
    web = _load_web_config(kw["web_config_file"])
    kw["http_limits"] = _http_limits(kw)
    kw["showback"] = showback_of(kw)
    showback = load_showback(kw["showback"], kw["showback_config_file"])
    config = _config(**kw)
    _check_listen_address(config)
    _setup_logging(config.log_level, config.log_format)
    run_server(config, web, showback)


def _check_listen_address(config: Config) -> None:
    """A taken port is one line naming the flag, before the sources (eBPF compile) start."""
    problem = listen_problem(config.listen_host, config.listen_port)
    if problem is not None:
        address = format_address(config.listen_host, config.listen_port)
        raise click.ClickException(
            f"cannot listen on {address}: {problem}; "
            "choose another address with --web.listen-address"
        )


def _load_web_config(path: Path | None) -> LiveWebConfig | None:
    """Validate --web.config.file at start-up: a bad file is one line naming the flag."""
    if path is None:
        return None
    try:
        return LiveWebConfig.load(path)
    except WebConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="'--web.config.file'") from None


def _http_limits(kw: dict[str, Any]) -> HttpLimits:
    return HttpLimits(
        max_connections=kw.pop("web_max_connections"),
        max_requests=kw.pop("web_max_requests"),
        header_timeout_s=kw.pop("web_header_timeout_s"),
        idle_timeout_s=kw.pop("web_idle_timeout_s"),
        write_timeout_s=kw.pop("web_write_timeout_s"),
        max_header_bytes=kw.pop("web_max_header_bytes"),
    )


def run_server(
    config: Config, web: LiveWebConfig | None = None, showback: LiveShowback | None = None
) -> None:
    """Serve until SIGTERM or SIGINT, then close everything the agent started."""
    agent = Agent(config, web, progress_for(), showback=showback)
    # before start(): a SIGTERM or Ctrl-C while it compiles eBPF or binds only asks wait() to
    # return at once (exit 0), instead of a KeyboardInterrupt mid-start (exit 130)
    previous = {sig: signal.signal(sig, lambda *_: agent.stop()) for sig in SHUTDOWN_SIGNALS}
    try:
        agent.start()
    except BaseException as exc:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if isinstance(exc, StartupError):
            raise click.ClickException(str(exc)) from None
        raise
    tune_for_serving()
    _log_web_security(web)
    # SIGHUP re-reads the web and showback configs, as Prometheus re-reads its own (without it,
    # SIGHUP's default action would end the process without a word). The handler only sets a
    # flag: the reload and its log line run on the main thread when it wakes.
    hangup = threading.Event()
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: hangup.set())

    def on_wake() -> None:
        if hangup.is_set():
            hangup.clear()
            _reload_web_config(web)
            if showback is not None and showback.path is not None:
                log.info("SIGHUP: re-reading showback config %s", showback.path)
                showback.reload()

    try:
        agent.wait(on_wake)
        log.info("shutting down")
    finally:
        agent.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _reload_web_config(web: LiveWebConfig | None) -> None:
    if web is None:
        log.info("SIGHUP: no --web.config.file to reload; nothing to do")
        return
    log.info("SIGHUP: re-reading web config %s", web.path)
    web.reload()


def _log_web_security(web: LiveWebConfig | None) -> None:
    state = web.current() if web is not None else None
    if state is None:
        return
    log.info(
        "TLS %s, basic auth %s (%s)",
        "on" if state.context is not None else "off",
        "on" if state.auth.enabled else "off",
        web.path if web is not None else "",
    )
    if state.auth.enabled and state.context is None:
        log.warning("basic auth without TLS: passwords cross the network in clear text")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON (docs/check.md)")
@kube_options
@source_options
def check(as_json: bool, **kw: Any) -> None:
    """Check every source on this machine: what works, what it found, how to fix the rest.

    Exit status: 0 when at least one power source and one activity source work, 1 when not,
    2 on a usage error (a bad flag or value).
    """
    config = _config(**kw)
    _setup_logging("error" if config.log_level == "info" else config.log_level, config.log_format)
    results = run_checks(config)
    status = exit_status(results)
    warnings = config_warnings(config)
    if as_json:
        click.echo(json.dumps(report(results, warnings), indent=2))
    else:
        for line in text_lines(results, warnings):
            click.echo(line)
    sys.exit(status)


@cli.command()
@_option(
    "--from",
    "from_url",
    default=None,
    metavar="URL",
    help="read a running exporter's /metrics (e.g. http://NODE:28390) instead of measuring here",
)
@_option(
    "--interval",
    "interval_s",
    default=None,
    callback=_converter(bounded_duration(INTERVAL_RANGE)),
    help="measuring interval [default: 2s]; with --from, how often to read [default: 1s]",
)
@click.option("--once", is_flag=True, help="print one screen after the first interval and exit")
@attribution_options
@kube_options
@source_options
def top(from_url: str | None, interval_s: float | None, once: bool, **kw: Any) -> None:
    """Live view: node power by zone, GPUs, and the pods drawing the most CPU and GPU power.

    Keys: c / g / i / n sort by CPU, GPU, billed idle power, name; v pods or containers; q quits.
    Without a terminal (or with --once) screens are printed one after another.
    """
    from exporter.app.top.command import TopError, metrics_url, run_top  # noqa: PLC0415 (rich loads only here)

    if from_url is not None:
        try:
            from_url = metrics_url(from_url)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--from'") from None
    if not kw["node_name"]:
        kw.pop("node_name")
    config = _config(**kw)
    _setup_logging("warn" if config.log_level == "info" else config.log_level, config.log_format)
    try:
        status = run_top(config, from_url=from_url, interval_s=interval_s, once=once)
    except TopError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(status)


def _idle_for(text: str) -> int:
    seconds = parse_duration(text)
    if seconds < 60 or seconds % 60:
        raise ValueError(f"{text!r} must be whole minutes, at least 1m")
    return int(seconds)


def _report_period(text: str) -> Any:
    from datetime import UTC, datetime  # noqa: PLC0415

    from exporter.app.report.period import parse_period  # noqa: PLC0415

    return parse_period(text, datetime.now(UTC))


@cli.command()
@click.option(
    "--prometheus",
    "prometheus",
    required=True,
    metavar="URL",
    envvar=_env("--prometheus"),
    show_envvar=True,
    help="Prometheus (or a compatible API) holding wattprobe's series, e.g. http://prometheus:9090",
)
@click.option(
    "--period",
    "period",
    default="last-month",
    show_default=True,
    callback=_converter(_report_period),
    help="last-month, this-month, YYYY-MM or YYYY-MM-DD..YYYY-MM-DD (UTC days, the end day "
    "included)",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="file to write",
)
@click.option(
    "--format",
    "fmt",
    default=None,
    type=click.Choice(["csv", "html", "png"]),
    help="csv (a spreadsheet), html (one self-contained page with plots), png (the plots, for "
    "chat; needs the 'report' extra) [default: from --out's suffix, else csv]",
)
@click.option(
    "--selector",
    default='job="wattprobe"',
    show_default=True,
    help='label matchers every query adds, e.g. job="wattprobe",cluster="eu-1" ("" for none)',
)
@click.option(
    "--timeout",
    "timeout_s",
    default="30s",
    show_default=True,
    callback=_converter(bounded_duration(TIMEOUT_RANGE)),
    help="per query",
)
@click.option(
    "--nodes-per-query",
    default="100",
    show_default=True,
    callback=_converter(_count_in(1, 100_000, "a query needs a node")),
    help="nodes one query covers",
)
@click.option(
    "--idle-for",
    "idle_for_s",
    default="1h",
    show_default=True,
    callback=_converter(_idle_for),
    help="how long an allocated GPU must stay idle before its hours count as idle (the "
    "WattprobeGpuIdleWhileAllocated alert's for)",
)
@click.option(
    "--allow-partial", is_flag=True, help="write the report despite days without data, noting them"
)
def report_command(prometheus: str, out: Path, fmt: str | None, **kw: Any) -> None:
    """Energy, facility energy, cost, carbon and GPU hours per namespace (docs/report.md).

    Exit status: 0 written, 1 when Prometheus is unreachable, refuses a query or has partial
    data, 2 on a usage error.
    """
    from exporter.app.report import ReportError  # noqa: PLC0415 (rich and the report load only here)
    from exporter.app.report.command import Options, check_url, run  # noqa: PLC0415

    if fmt is None:
        fmt = {".html": "html", ".htm": "html", ".png": "png"}.get(out.suffix.lower(), "csv")
    # {job="x"} as PromQL writes it, or job="x": both mean the matchers
    selector = kw["selector"].strip().removeprefix("{").removesuffix("}").strip()
    try:
        url = check_url(prometheus)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--prometheus'") from None
    try:
        done = run(
            Options(
                url,
                kw["period"],
                out,
                fmt,
                selector,
                kw["timeout_s"],
                kw["nodes_per_query"],
                kw["idle_for_s"],
                kw["allow_partial"],
            )
        )
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    # what the figures leave out (nodes without a price, PUE...): the HTML page shows them too
    for note in done.notes:
        click.echo(f"wattprobe: note: {note}", err=True)


report_command.name = "report"


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad usage gives one line naming the flag, never a traceback."""
    try:
        cli.main(args=argv, prog_name="wattprobe", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"wattprobe: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
