"""``gnn-treelstm fetch``: download the official benchmark archives, or copy a local mirror.

What is fetched and where it goes: :mod:`gnn_treelstm.datasets.fetch`. Exit status 2 for bad
input, 1 when a download or a copy fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from gnn_treelstm.datasets.fetch import (
    DEFAULT_GROUPS,
    GROUPS,
    RESOURCES,
    FetchError,
    copy_from_mirror,
    fetch,
    resolve_url,
)

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    parser = argparse.ArgumentParser(
        prog="gnn-treelstm fetch",
        description="Download the official benchmark archives, or copy a local mirror.",
    )
    parser.add_argument("--dest", default="data", help="where to put the data (default: data)")
    parser.add_argument("--from", dest="mirror", metavar="DIR",
                        help="copy from a local mirror laid out like the data README instead "
                             "of downloading")
    parser.add_argument("--datasets", default=",".join(DEFAULT_GROUPS),
                        help=f"comma-separated groups or resource names to download "
                             f"(groups: {', '.join(GROUPS)}; default: %(default)s)")
    parser.add_argument("--base-url", help="replace the folder of every official URL "
                                           "(a private mirror of the archives)")
    parser.add_argument("--force", action="store_true", help="fetch/copy even if present")
    parser.add_argument("--keep-archives", action="store_true",
                        help="keep downloaded archives in DEST/.downloads")
    parser.add_argument("--no-verify", action="store_true",
                        help="with --from: do not check SHA256SUMS")
    parser.add_argument("--list", action="store_true", help="print the URL table and exit")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 0, 2 for bad input (a ``--from`` folder that is missing or holds no
    mirror, an unknown data set), 1 when a download or a copy fails."""
    parser = build_parser()
    args = parser.parse_args(argv)
    groups = [g.strip() for g in args.datasets.split(",") if g.strip()]
    if not groups and not args.mirror:
        parser.error(f"--datasets {args.datasets!r}: name at least one of {', '.join(GROUPS)}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.list:
        for r in RESOURCES:
            print(f"{r.group:10} {r.name:11} {resolve_url(r, args.base_url)}"
                  f"{'  (' + r.note + ')' if r.note else ''}")
        return 0
    try:
        if args.mirror:
            status = copy_from_mirror(args.mirror, args.dest, force=args.force,
                                      verify=not args.no_verify, progress=not args.quiet)
        else:
            status = fetch(args.dest, groups, base_url=args.base_url, force=args.force,
                           keep_archives=args.keep_archives, progress=not args.quiet)
    except ValueError as exc:  # the input: nothing was tried
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FetchError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    counts: dict[str, int] = {}
    for v in status.values():
        counts[v] = counts.get(v, 0) + 1
    print(f"{args.dest}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
