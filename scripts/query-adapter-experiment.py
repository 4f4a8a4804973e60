#!/usr/bin/env python3
"""Experiment (not part of the product): a query adapter over frozen embeddings for tool
retrieval, measured where it cannot memorise.

A linear map W (384 x 384, started at the identity) is applied to each query embedding before
its cosine with the tool embeddings; it is trained with a softmax over the training tools
(temperature 0.05, Adam, 300 full-batch steps) and an L2 pull towards the identity (LAMBDA).
Reported: embedding-only recall@1/5 over all tools, without and with the adapter, on the
splits scripts/eval-split.py makes (by tool and by query, buckets 0 and 1).

Usage: scripts/query-adapter-experiment.py CACHE TOOLS QUERIES [LAMBDA ...]
  CACHE   an embedding cache file written by switchyard-tool-eval --embedding-cache for TOOLS
          and QUERIES (it holds every tool text and query vector)
  TOOLS   {"name", "description"} lines; QUERIES {"query", "tool"} lines
Needs numpy."""
import hashlib, json, struct, sys

import numpy as np

FOLDS = 5


def read_cache(path):
    """The models crate's cache file: magic, version, digest, dimensions, count, entries."""
    data = open(path, "rb").read()
    assert data[:8] == b"SYEMBED\0", "not an embedding cache file"
    at = 8 + 4 + 32
    (dimensions,) = struct.unpack_from("<I", data, at)
    (count,) = struct.unpack_from("<Q", data, at + 4)
    at += 12
    vectors = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<I", data, at)
        text = data[at + 4 : at + 4 + length].decode()
        at += 4 + length
        vectors[text] = np.frombuffer(data, dtype="<f4", count=dimensions, offset=at)
        at += 4 * dimensions
    return vectors


def recall(scores, labels, k):
    ranks = (scores > scores[np.arange(len(labels)), labels][:, None]).sum(1)
    return (ranks < k).mean()


def train(queries, labels, tool_set, tools, strength, tau=0.05, steps=300, rate=1e-3):
    d = queries.shape[1]
    w = np.eye(d)
    targets = tools[tool_set]
    position = {t: i for i, t in enumerate(tool_set)}
    y = np.array([position[v] for v in labels])
    m, v = np.zeros_like(w), np.zeros_like(w)
    for step in range(1, steps + 1):
        z = queries @ w.T
        norm = np.linalg.norm(z, axis=1, keepdims=True)
        zn = z / norm
        logits = zn @ targets.T / tau
        logits -= logits.max(1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(y)), y] -= 1
        g = p @ targets / tau / len(y)
        gz = (g - (g * zn).sum(1, keepdims=True) * zn) / norm
        grad = gz.T @ queries + strength * (w - np.eye(d))
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        w -= rate * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return w


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    vectors = read_cache(sys.argv[1])
    tools = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
    rows = [json.loads(line) for line in open(sys.argv[3]) if line.strip()]
    strengths = [float(a) for a in sys.argv[4:]] or [0.1]
    # A tool's vector is the cache entry of its document ("Name Words: description ...").
    tool_vectors = []
    for tool in tools:
        matches = [t for t, _ in vectors.items() if (": " + tool["description"]) in t]
        matches.sort(key=lambda t: t.split(": ")[0].replace(" ", "") != tool["name"].replace(" ", ""))
        tool_vectors.append(vectors[matches[0]])
    tool_vectors = np.array(tool_vectors)
    index = {tool["name"]: i for i, tool in enumerate(tools)}
    queries = np.array([vectors[row["query"]] for row in rows])
    labels = np.array([index[row["tool"]] for row in rows])

    def evaluate(w, q, y):
        z = q @ w.T
        z /= np.linalg.norm(z, axis=1, keepdims=True)
        s = z @ tool_vectors.T
        return recall(s, y, 1), recall(s, y, 5)

    for by in ("tool", "query"):
        for bucket in (0, 1):
            held = np.array([int(hashlib.sha1(r[by].encode()).hexdigest(), 16) % FOLDS == bucket for r in rows])
            train_rows, test_rows = np.where(~held)[0], np.where(held)[0]
            tool_set = sorted(set(labels[train_rows]))
            base = evaluate(np.eye(queries.shape[1]), queries[test_rows], labels[test_rows])
            for strength in strengths:
                w = train(queries[train_rows], labels[train_rows], tool_set, tool_vectors, strength)
                adapted = evaluate(w, queries[test_rows], labels[test_rows])
                print(
                    f"by {by} bucket {bucket} lambda {strength}: recall@1/5 "
                    f"{base[0]:.3f} {base[1]:.3f} -> {adapted[0]:.3f} {adapted[1]:.3f}",
                    flush=True,
                )


main()
