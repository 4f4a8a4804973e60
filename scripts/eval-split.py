#!/usr/bin/env python3
"""Splits a MetaTool-shaped queries file into HISTORY (4/5) and QUERIES (1/5), so tuning on the
dev file never evaluates a query against itself.

Usage: scripts/eval-split.py [--by query|tool] [--bucket N] DEV_QUERIES OUT_DIR
(writes OUT_DIR/history.jsonl and OUT_DIR/queries.jsonl)

--by query (the default): each line goes by a hash of its query text; the evaluated queries'
  tools all have other queries in the history, as in a gateway that has run for a while.
--by tool: each line goes by a hash of its tool's name, so the evaluated queries belong to
  tools no history query ever led to. Anything learned from the history (the usage prior, an
  adapter, fused weights) is then measured where it cannot have memorised the answer.
--by both: the held-out tools' queries as with --by tool, plus the other tools' queries
  held out as with --by query: a gateway where some tools are new, so whatever helps new
  tools is paid for by the tools with history, and the other way round.
--bucket N (0-4, default 0): which fifth is evaluated; another bucket checks that nothing was
  fitted to one split."""
import argparse, hashlib, json, os

FOLDS = 5

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--by", choices=("query", "tool", "both"), default="query")
parser.add_argument("--bucket", type=int, choices=range(FOLDS), default=0)
parser.add_argument("source")
parser.add_argument("out")
args = parser.parse_args()

os.makedirs(args.out, exist_ok=True)
with open(args.source) as rows, open(f"{args.out}/history.jsonl", "w") as history, open(
    f"{args.out}/queries.jsonl", "w"
) as queries:
    for line in rows:
        if line.strip():
            row = json.loads(line)
            bucket = {key: int(hashlib.sha1(row[key].encode()).hexdigest(), 16) % FOLDS for key in ("query", "tool")}
            if args.by == "both":
                held_out = args.bucket in (bucket["query"], bucket["tool"])
            else:
                held_out = bucket[args.by] == args.bucket
            (queries if held_out else history).write(line if line.endswith("\n") else line + "\n")
