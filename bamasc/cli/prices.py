"""`bamasc prices [MODEL]`: what the offline price catalogue says, per entry or in summary."""

from __future__ import annotations

from bamasc.cli import output
from bamasc.cli.report import Report

MAX_LISTED = 20


def add_parser(commands) -> None:
    prices = commands.add_parser("prices", help="show the offline price catalogue (USD per million tokens)")
    prices.add_argument("model", metavar="MODEL", nargs="?",
                        help="an entry such as openai/gpt-4.1-nano, or a part of one to search for")
    prices.add_argument("--export", metavar="FILE",
                        help="pin the installed snapshot's prices, as taken today, in FILE; "
                             "BAMASC_CATALOG=FILE then makes every command read them from it")
    prices.set_defaults(run=run)


def run(args) -> int:
    from bamasc import catalog

    report = Report()
    if args.export is not None:
        return _export(args, report)
    try:
        with catalog.from_package():  # the package is loaded anyway: show its own prices, not the cache's
            _show(args, report)
    except catalog.PinnedCatalogError as problem:
        output.usage(report, str(problem))
    for problem in catalog.take_cache_problems():
        output.warning(problem)
    return report.return_code


def _export(args, report: Report) -> int:
    from bamasc import catalog

    if args.model is not None:
        output.usage(report, "--export writes every entry: give no MODEL with it")
        return report.return_code
    if catalog.pinned.path() is not None:
        output.usage(report, f"{catalog.pinned.ENVIRONMENT} is set: --export reads the installed package, "
                             "so unset it first")
        return report.return_code
    try:
        count = catalog.export(args.export)
    except OSError as problem:
        output.usage(report, f"cannot write {args.export}: {problem.strerror or problem}")
        return report.return_code
    date, estimated = catalog.snapshot_date()
    print(f"pinned {count} entries of {catalog.PACKAGE} {catalog.version()} (snapshot of {date.isoformat()}"
          f"{', estimated' if estimated else ''}, taken on {catalog.today().isoformat()}) in {args.export}")
    return report.return_code


def _show(args, report: Report) -> int:
    from bamasc import catalog

    if args.model is None:
        print(summary())
        return report.return_code
    try:
        print(describe(catalog.pricing(args.model)))
        return report.return_code
    except catalog.CatalogError as problem:
        found = catalog.search(args.model) if "/" not in args.model else []
        if found:
            shown = found[:MAX_LISTED]
            more = f"\n... and {len(found) - len(shown)} more" if len(found) > len(shown) else ""
            print(f"{len(found)} catalogue entries contain '{args.model}':\n" + "\n".join(shown) + more)
            return report.return_code
        close = ", ".join(problem.close)
        output.usage(report, f"{problem}" + (f"; close matches: {close}" if close else ""))
    return report.return_code


def summary() -> str:
    from bamasc import catalog

    date, estimated = catalog.snapshot_date()
    refs = catalog.entry_refs()
    providers = sorted({ref.partition("/")[0] for ref in refs})
    source = catalog.pinned.path()
    return "\n".join([
        f"catalogue: {catalog.PACKAGE} {catalog.version()}, snapshot of {date.isoformat()}"
        + (" (estimated)" if estimated else "") + (f", pinned in {source}" if source else ""),
        f"prices taken on {catalog.today().isoformat()} (age {(catalog.today() - date).days} days; "
        f"lint warns past {catalog.MAX_SNAPSHOT_AGE_DAYS})",
        f"{len(refs)} entries from {len(providers)} providers: {', '.join(providers)}",
        "rates are USD per million tokens; `bamasc prices PROVIDER/MODEL` shows one entry",
    ])


def describe(pricing) -> str:
    def rate(value) -> str:
        return "-" if value is None else f"{value:g}"

    lines = [
        f"{pricing.catalog} (snapshot of {pricing.snapshot}), USD per million tokens",
        f"  input        {rate(pricing.input)}",
        f"  output       {rate(pricing.output)}",
        f"  cache read   {rate(pricing.cache_read)}",
        f"  cache write  {rate(pricing.cache_write)}   (never billed: bamasc sends no cache_control)",
        f"  batch        input {rate(pricing.batch_input)}, output {rate(pricing.batch_output)}   (recorded, not used)",
    ]
    if pricing.per_request:
        lines.append(f"  per request  {pricing.per_request:g} µ$")
    for tier in pricing.tiers:
        lines.append(
            f"  prompts above {tier.above} tokens: input {rate(tier.input)}, output {rate(tier.output)}, "
            f"cache read {rate(tier.cache_read)}, cache write {rate(tier.cache_write)}"
        )
    if not pricing.tiers:
        lines.append("  no tiers: one rate for every prompt length")
    return "\n".join(lines)
