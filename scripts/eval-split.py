#!/usr/bin/env python3
"""Splits a MetaTool-shaped queries file into HISTORY (4/5) and QUERIES (1/5) by a hash of the
query text, so tuning on the dev file never evaluates a query against itself.
Usage: scripts/eval-split.py DEV_QUERIES OUT_DIR   (writes OUT_DIR/history.jsonl, OUT_DIR/queries.jsonl)"""
import hashlib, json, os, sys

source, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with open(source) as rows, open(f"{out}/history.jsonl", "w") as history, open(f"{out}/queries.jsonl", "w") as queries:
    for line in rows:
        if line.strip():
            bucket = int(hashlib.sha1(json.loads(line)["query"].encode()).hexdigest(), 16) % 5
            (queries if bucket == 0 else history).write(line if line.endswith("\n") else line + "\n")
