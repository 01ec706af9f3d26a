"""`bamasc proxy`: an OpenAI- and Anthropic-compatible proxy that holds every scope to its budget."""

from __future__ import annotations

import os

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output
from bamasc.cli.report import Report

PROXY_MODULES = ("starlette", "uvicorn", "prometheus_client")
MAX_HEAD = 16 << 10  # bytes of a request's line and headers, as `bamasc serve` takes (h11's default); more get 431


def add_parser(commands) -> None:
    proxy = commands.add_parser(
        "proxy", help="an OpenAI/Anthropic-compatible proxy that enforces budgets per scope (needs bamasc[proxy])")
    proxy.add_argument("--config", default="proxy.bam", metavar="FILE",
                       help="a .bam file declaring the upstream models (provider, name, prices, key variable); "
                            "a system's `budget` is the default per scope (default: proxy.bam)")
    proxy.add_argument("--system", help="the system whose budget is the default per scope (default: the only one)")
    proxy.add_argument("--budget", type=cli_args.budget, metavar="B",
                       help="µ$ (or $) per scope for requests without X-Bamasc-Budget (default: the system's budget)")
    proxy.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    proxy.add_argument("--port", type=cli_args.whole, default=8787, help="port to listen on (default 8787; 0: any free one)")
    proxy.add_argument("--trace", metavar="JSONL",
                       help="every reservation, call and budget given is appended here; a restart on it keeps "
                            "each scope's spend and tightest budget")
    cli_args.add_run_options(proxy, "--total-budget",
                             total_budget="µ$ (or $) for everything forwarded, the trace's earlier spend included; "
                                          "with --redis, the ledger's: the proxy that starts it sets it, one that "
                                          "joins uses it (and refuses to start with another)")
    proxy.add_argument("--redis", metavar="URL",
                       help="share the scopes and the total with every proxy given this Redis URL (the proxy extra); "
                            "redis+cluster://HOST:PORT[,HOST:PORT] for a Redis Cluster (the ledger sharded, the "
                            "total leased in slices); the ledger must exist (see --new-ledger)")
    proxy.add_argument("--redis-prefix", default="bamasc", metavar="NAME", help="key prefix of the shared ledger")
    proxy.add_argument("--new-ledger", action="store_true",
                       help="with --redis: start the shared ledger (the fleet's first proxy, or after Redis lost "
                            "the ledger), with this --total-budget, folding in what --trace and every --fold-trace "
                            "hold; refused where a ledger exists")
    proxy.add_argument("--fold-trace", action="append", default=[], metavar="JSONL",
                       help="with --redis: another proxy's trace, whose spend under a lost ledger is folded in "
                            "before anything is served (once per run of it); may be repeated")
    auth = proxy.add_mutually_exclusive_group()
    auth.add_argument("--token-env", metavar="VAR",
                      help="the environment variable holding the token clients send as their API key (one shared "
                           "token: its scopes are named as sent; give keys instead, or as well, for budgets the "
                           "operator sets)")
    auth.add_argument("--no-auth", action="store_true", help="accept any client (only where nobody else can reach the port)")
    proxy.add_argument("--admin-token-env", metavar="VAR",
                       help="the environment variable holding the admin token: enables /v1/admin/ (keys and teams, "
                            "their budgets and windows), which takes that token only")
    proxy.add_argument("--keys", metavar="JSONL",
                       help="the journal of the keys and teams made through /v1/admin/ (each change appended): "
                            "without --redis, a restart replays it; with --redis, where they live, --new-ledger "
                            "makes them again after Redis lost them")
    proxy.add_argument("--max-body", type=cli_args.positive, default=32 << 20, metavar="BYTES",
                       help="largest request body read (default 32 MiB); a larger one gets 413")
    proxy.add_argument("--max-connections", type=cli_args.positive, default=1024, metavar="N",
                       help="client connections held at once (default 1024); one more is answered 503 and closed")
    proxy.add_argument("--request-timeout", type=cli_args.seconds, default=30.0, metavar="S",
                       help="seconds a request's head, and then its body, may take to arrive (default 30); "
                            "a slower one gets 408")
    proxy.add_argument("--timeout", type=cli_args.seconds, default=600.0, metavar="S",
                       help="seconds an upstream call may take (default 600); then its reservation is kept")
    proxy.add_argument("--graceful-timeout", type=cli_args.seconds, default=30.0, metavar="S",
                       help="on SIGTERM or Ctrl-C, seconds calls in flight may take to finish (default 30); "
                            "a call cut then keeps its reservation")
    proxy.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"), default="warning")
    proxy.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    import importlib.util

    needed = PROXY_MODULES + (("redis",) if args.redis else ())
    missing = [module for module in needed if importlib.util.find_spec(module) is None]
    if missing:
        output.failure(report, f"bamasc proxy needs the proxy extra ({', '.join(missing)} not installed): "
                               "pip install 'bamasc[proxy]'")
        return report.return_code
    if not os.path.isfile(args.config):
        output.usage(report, f"no such file: {args.config} (give --config FILE, a .bam file declaring the models)")
        return report.return_code
    token = None
    if args.token_env or args.no_auth:
        token = inputs.bearer_token(report, args, "proxying without authentication (--no-auth): anyone who reaches "
                                                  "the port can spend the budgets")
    admin_token = None
    if args.admin_token_env:
        admin_token = os.environ.get(args.admin_token_env, "").strip().encode("utf-8", "surrogateescape") or None
        if admin_token is None:
            output.usage(report, f"--admin-token-env {args.admin_token_env}: the environment variable is not set or "
                                 "empty")
        elif admin_token == token:
            output.usage(report, "--admin-token-env and --token-env hold the same token: the admin token must be "
                                 "its own")
    if report.return_code:
        return report.return_code
    if (args.new_ledger or args.fold_trace) and not args.redis:
        output.usage(report, "--new-ledger and --fold-trace need --redis (a local ledger is its own --trace)")
        return report.return_code
    if args.trace and not inputs.writable(report, args.trace, "the trace"):
        return report.return_code
    if not all(inputs.is_file(report, path) for path in args.fold_trace):
        return report.return_code
    settings = _settings(report, args, token)
    if settings is None:
        return report.return_code
    settings.admin_token = admin_token
    if not (args.token_env or args.no_auth or admin_token or settings.declared_keys):
        output.usage(report, "who may call the proxy: give --token-env VAR (one shared token), --admin-token-env VAR "
                             "or keys in the config (keys the operator makes), or --no-auth")
        return report.return_code
    import asyncio

    from bamasc.metering.keys import PolicyError
    from bamasc.metering.redis_ledger import LedgerMismatch
    from bamasc.metering.refusals import Refused
    from bamasc.proxy.app import build_app
    from bamasc.serve.main import Listen, bind

    listen = Listen(args.host, args.port, args.log_level, args.graceful_timeout)
    try:
        sock = bind(listen)
    except OSError as problem:
        output.usage(report, f"cannot listen on {args.host}:{args.port}: {problem.strerror or problem}")
        return report.return_code
    trace = None
    try:
        ledger, trace = _ledger(report, args)
        if ledger is None:
            return report.return_code
        if args.redis:  # every proxy of the ledger paces each upstream key together
            from bamasc.metering.redis_pace import SharedLimiter

            settings.limiter = SharedLimiter(settings.limiter, ledger)
        if admin_token is not None or settings.declared_keys:
            settings.keys = _key_store(report, args, ledger)
            if settings.keys is None:
                return report.return_code
        asyncio.run(_serve(build_app(settings, ledger), ledger, listen, sock, args.max_connections,
                           args.request_timeout, settings))
    except KeyboardInterrupt:
        pass
    except Refused as refused:  # the shared ledger cannot be joined: nothing was served
        output.failure(report, f"--redis {args.redis}: {refused.error}")
    except LedgerMismatch as problem:  # no ledger to join, one where a new one was asked for, another total
        output.failure(report, f"--redis {args.redis}: {problem}")
    except PolicyError as problem:  # a key of the config that cannot join the keys the store holds
        output.failure(report, f"{args.config}: {problem}")
    finally:
        sock.close()
        if trace is not None:
            trace.close()
    return report.return_code


def _ledger(report: Report, args):
    """The ledger the proxy serves from, and its trace; (None, None) once a trace that cannot be read is reported.

    Every trace is read whole first: a damaged one stops the proxy before a
    ledger is started, joined or folded into.
    """
    from bamasc.runtime.trace import TraceError, TraceWriter, read_ledgers

    fold = tuple(args.fold_trace) if args.redis else ()
    try:
        earlier = read_ledgers(args.trace) if args.trace else {}
        for path in fold:
            read_ledgers(path)
        trace = TraceWriter(args.trace) if args.trace else None
    except (TraceError, OSError) as problem:
        output.failure(report, problem)
        return None, None
    if args.redis:
        from bamasc.metering.sharded_ledger import shared_ledger

        try:
            return shared_ledger(args.redis, args.total_budget, args.redis_prefix, trace, args.new_ledger, fold), trace
        except ValueError as problem:  # a cluster URL without HOST:PORT nodes, or a prefix with braces
            if trace is not None:
                trace.close()
            output.usage(report, f"--redis {args.redis}: {problem}")
            return None, None
    from bamasc.metering.ledger import LocalLedger, level_spend, scope_limits

    limits = scope_limits(args.trace) if args.trace else {}
    levels = level_spend(args.trace) if args.trace else {}
    return LocalLedger(args.total_budget, trace, earlier, limits, levels), trace


def _key_store(report: Report, args, ledger):
    """The store of client keys: in Redis with the ledger, else this process's (journaled to --keys)."""
    if args.redis:
        from bamasc.metering.redis_keys import JournaledKeys, RedisKeyStore

        if args.keys:
            try:
                return JournaledKeys(RedisKeyStore(ledger), args.keys)
            except (OSError, ValueError) as problem:
                output.failure(report, f"--keys {args.keys}: {problem}")
                return None
        return RedisKeyStore(ledger)
    from bamasc.metering.keys import KeyStore

    try:
        return KeyStore(args.keys)
    except (OSError, ValueError) as problem:
        output.failure(report, f"--keys {args.keys}: {problem}")
        return None


async def _declare(settings) -> None:
    """The config's teams and keys into the store (each secret from its variable), before anything is served."""
    for team in settings.declared_teams:
        await settings.keys.add_team(team, journal=False)
    for key, secret in settings.declared_keys:
        await settings.keys.add_key(key, secret, journal=False)


async def _serve(app, ledger, listen, sock, max_connections: int, request_s: float, settings) -> None:
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from bamasc.http.connections import ConnectionLimits, limited_protocol
    from bamasc.serve.main import BACKLOG, connection_cap, run_app, say

    # The limits `bamasc serve` puts on each connection: a cap (503 as one more opens), 431 past MAX_HEAD bytes
    # of an unfinished head, 408 for a head slower than `request_s` (the app answers 408 for a body as slow).
    connections = connection_cap(max_connections, "proxy")
    # Its refusals are counted with the app's responses in /metrics.
    protocol = limited_protocol(AutoHTTPProtocol, ConnectionLimits(connections, MAX_HEAD, request_s),
                                app.state.metrics.responses)

    await ledger.open()
    if settings.keys is not None and getattr(ledger, "create", False) and hasattr(settings.keys, "restore"):
        made = await settings.keys.restore()  # a new ledger: the keys and teams this proxy's journal holds
        if made:
            say(f"made again {made} key(s) and team(s) of the --keys journal in the new ledger", "proxy")
    if settings.keys is not None:
        await _declare(settings)
    if getattr(ledger, "folded", 0):
        say(f"folded into the ledger what {ledger.folded} trace run(s) spent outside it", "proxy")
    totals = await ledger.totals()
    if ledger.total is not None:
        say(f"total budget {ledger.total:g} µ$: {totals['charged'] + totals['held']:.1f} spent, "
            f"{totals['left']:.1f} left", "proxy")
    try:
        await run_app(app, listen, sock, lambda url: say(f"proxying on {url} (OpenAI: /v1/chat/completions, "
                                                         "Anthropic: /v1/messages)", "proxy"), lifespan="on",
                      limit_concurrency=connections + 1, http=protocol, backlog=min(BACKLOG, connections),
                      h11_max_incomplete_event_size=MAX_HEAD)
    finally:
        if hasattr(ledger, "shutdown"):  # a cluster ledger's slices: reported, and their room given back
            await ledger.shutdown()
        if ledger.trace is not None:
            ledger.trace.close()


def _settings(report: Report, args, token):
    from bamasc.plan.compile import check_file
    from bamasc.provider_registry import lookup
    from bamasc.proxy.config import Settings, Upstream
    from bamasc.runtime.providers import api_key
    from bamasc.runtime.providers.base import ProviderError

    program, found, sources = check_file(args.config)
    report.add(found)
    output.diagnostics(found, sources)
    if program is None or report.errors:
        return None
    upstreams = {}
    for model in program.models.values():
        record = lookup(model.provider)
        if record is None or record.protocol is None:
            continue  # a provider whose server speaks no wire protocol the proxy serves
        try:
            key = api_key(model)
        except ProviderError as problem:
            output.usage(report, f"{args.config}: {problem}")
            return None
        upstream = Upstream(model, key, record.protocol)
        for name in (model.name, model.model_id):
            upstreams.setdefault((record.protocol, name), upstream)
    if not upstreams:
        output.usage(report, f"{args.config} declares no openai or anthropic model to forward to")
        return None
    budget = args.budget
    if budget is None:
        systems = list(program.systems.values())
        if args.system is not None:
            chosen = program.systems.get(args.system)
            if chosen is None:
                output.usage(report, f"--system: no system '{args.system}' in {args.config}")
                return None
            budget = chosen.budget
        elif len(systems) == 1:
            budget = systems[0].budget
    from bamasc.runtime.tokens import exact_prompt_tokens, tokenizer_available

    from bamasc.metering.limiter import limiter_for

    exact = exact_prompt_tokens if tokenizer_available() else None
    models = {id(upstream.model): upstream.model for upstream in upstreams.values()}.values()
    settings = Settings(upstreams, budget, token, max_body=args.max_body, timeout=args.timeout, exact=exact,
                        limiter=limiter_for(models), request_s=args.request_timeout)
    declared = _declared(report, args, program)
    if declared is None:
        return None
    settings.declared_teams, settings.declared_keys = declared
    return settings


def _declared(report: Report, args, program):
    """The config's `team` and `key` declarations as the store takes them, each key with its secret from the
    environment; None once a missing secret is reported."""
    from bamasc.metering.keys import KeyPolicy, TeamPolicy, Window

    teams = [TeamPolicy(team.name, tuple(Window(budget.amount, budget.per) for budget in team.budgets))
             for team in getattr(program, "teams", {}).values()]
    keys = []
    for key in getattr(program, "keys", {}).values():
        secret = os.environ.get(key.secret_env, "").strip()
        if not secret:
            output.usage(report, f"{args.config}: key '{key.name}' reads its secret from ${key.secret_env}, which is "
                                 "not set or empty")
            return None
        keys.append((KeyPolicy(key.name, key.team, key.scope_budget,
                               tuple(Window(budget.amount, budget.per) for budget in key.budgets), key.models,
                               key.on_exhausted), secret))
    return teams, keys
