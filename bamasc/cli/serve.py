"""`bamasc serve`: a compiled plan over HTTP, every task within its budget and the server's total."""

from __future__ import annotations

from bamasc.cli import args as cli_args
from bamasc.cli import inputs, output
from bamasc.cli.report import Report

SERVE_MODULES = ("starlette", "uvicorn", "prometheus_client")


def add_parser(commands) -> None:
    serve = commands.add_parser("serve", help="serve a compiled plan over HTTP (needs bamasc[serve])")
    serve.add_argument("file", metavar="PLAN", help="a plan written by `bamasc compile -o`")
    serve.add_argument("--system", help="the system of the plan to serve (default: its first)")
    serve.add_argument("--template", help="run this template instead of the selected one")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=cli_args.whole, default=8080, help="port to listen on (default 8080; 0: any free one)")
    cli_args.add_run_options(
        serve, "--total-budget", "--concurrency",
        total_budget="µ$ (or $) for every task served, what the trace holds from earlier runs included: a task "
                     "starts only if its worst case fits in what is left, else it gets 402",
        concurrency="tasks run at once (default 8); more wait for a turn",
    )
    serve.add_argument("--trace", metavar="JSONL",
                       help="the ledger: every reservation, call and task is appended here; a restart on it keeps the total")
    auth = serve.add_mutually_exclusive_group()
    auth.add_argument("--token-env", metavar="VAR", help="the environment variable holding the bearer token every route but /healthz needs")
    auth.add_argument("--no-auth", action="store_true", help="serve without a token (only where nobody else can reach the port)")
    cli_args.add_run_options(serve, "--fake", "--cassette", "--timeout", "--retries",
                             cassette="play recorded calls back offline instead of calling the models")
    serve.add_argument("--redis", metavar="URL",
                       help="take the client keys of the proxy fleet whose ledger is at this Redis URL (the proxy "
                            "extra): a key's task is held in its key's and team's windows there (docs/proxy.md)")
    serve.add_argument("--redis-prefix", default="bamasc", metavar="NAME", help="key prefix of that ledger")
    serve.add_argument("--fake-latency", type=cli_args.seconds, metavar="S", help="with --fake: seconds every reply takes")
    serve.add_argument("--max-body", type=cli_args.positive, default=1 << 20, metavar="BYTES",
                       help="largest request body read (default 1 MiB); a larger one gets 413")
    serve.add_argument("--max-pending", type=cli_args.positive, default=1024, metavar="N",
                       help="tasks running or waiting at once (default 1024); more get 429")
    serve.add_argument("--keep", type=cli_args.positive, default=1_000, metavar="N",
                       help="recent tasks GET /v1/tasks/{id} shows from memory (default 1000); older ones are read from the trace")
    serve.add_argument("--request-timeout", type=cli_args.seconds, default=30.0, metavar="S",
                       help="seconds a request's line and headers may take to arrive, then its body (default 30); "
                            "a slower request gets 408 and its connection is closed")
    serve.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"), default="warning")
    serve.set_defaults(run=run)


def run(args) -> int:
    report = Report()
    import importlib.util

    missing = [module for module in SERVE_MODULES if not _installed(importlib.util, module)]
    if missing:
        output.failure(report, f"bamasc serve needs the serve extra ({', '.join(missing)} not installed): "
                               "pip install 'bamasc[serve]'")
        return report.return_code
    if not args.file.endswith(".json"):
        output.usage(report, f"serve takes a compiled plan: bamasc compile {args.file} -o plan.json")
        return report.return_code
    if args.fake_latency is not None and args.fake is None:
        output.usage(report, "--fake-latency needs --fake")
        return report.return_code
    if not (args.token_env or args.no_auth or args.redis):
        output.usage(report, "who may call: give --token-env VAR, --redis URL (the proxy fleet's client keys), "
                             "or --no-auth")
        return report.return_code
    if args.redis and importlib.util.find_spec("redis") is None:
        output.failure(report, "--redis needs the redis client (pip install 'bamasc[proxy]')")
        return report.return_code
    token = None
    if args.token_env or args.no_auth:
        token = inputs.bearer_token(report, args, "serving without authentication (--no-auth): anyone who reaches "
                                                  "the port can spend the budget")
    if report.return_code:
        return report.return_code
    if args.trace and not inputs.writable(report, args.trace, "the trace"):
        return report.return_code
    import bamasc

    try:
        plan = bamasc.Plan.load(args.file, args.system)
    except bamasc.BamError as problem:
        (output.usage if problem.exit_code == 2 else output.failure)(report, problem.message)
        return report.return_code
    from bamasc.serve.main import Limits, Listen, bind, say, serve

    listen = Listen(args.host, args.port, args.log_level)
    limits = Limits(max_body=args.max_body, max_pending=args.max_pending, keep=args.keep, request_s=args.request_timeout)
    try:
        sock = bind(listen)
    except OSError as problem:
        output.usage(report, f"cannot listen on {args.host}:{args.port}: {problem.strerror or problem}")
        return report.return_code
    provider = None
    if args.fake:
        provider = bamasc.providers.fake(args.fake, latency_s=args.fake_latency)
    elif args.cassette:
        provider = bamasc.providers.cassette(args.cassette)
    session = plan.session(trace=args.trace, total_budget=args.total_budget, concurrency=args.concurrency,
                           provider=provider, template=args.template, timeout=args.timeout, retries=args.retries)
    import asyncio

    from bamasc.metering.redis_ledger import LedgerMismatch
    from bamasc.metering.refusals import Refused

    async def main() -> None:
        gate = await _gate(args) if args.redis else None
        await session.open()
        state = session.budget
        if state.total is not None:
            say(f"total budget {state.total:g} µ$: {state.spent:.1f} spent in the trace, {state.left:.1f} left")
        await serve(plan, session, token, listen, limits, sock, lambda url: say(f"serving system '{plan.system}' on {url}"),
                    gate)

    try:
        asyncio.run(main())
    except bamasc.BamError as problem:
        (output.usage if problem.exit_code == 2 else output.failure)(report, problem.message)
    except (Refused, LedgerMismatch) as problem:  # the fleet's ledger cannot be joined: nothing was served
        output.failure(report, f"--redis {args.redis}: {getattr(problem, 'error', None) or problem}")
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return report.return_code


async def _gate(args):
    """The proxy fleet's keys and ledger, joined (never started: a ledger is the operator's to start)."""
    import time

    from bamasc.metering.redis_keys import RedisKeyStore
    from bamasc.metering.sharded_ledger import shared_ledger
    from bamasc.serve.keys import KeyGate

    ledger = shared_ledger(args.redis, None, args.redis_prefix)
    await ledger.open()
    return KeyGate(RedisKeyStore(ledger), ledger, time.time)


def _installed(util, module: str) -> bool:
    """Whether `module` can be imported, found without importing it."""
    try:
        return util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or one blocked in sys.modules
        return False
