"""Clustering benchmark: generated, labelled statements -> embed, dedupe, cluster (per node + system), name.

    .venv/bin/python -m benchmarks.clustering                    # 10k, 50k, 100k; each size in a fresh process
    .venv/bin/python -m benchmarks.clustering --sizes 2000       # smoke run
    .venv/bin/python benchmarks/clustering/run.py --help

Each size runs in its own child process (so its peak RSS is its own) with a cold embedding cache: every
distinct normalised text is embedded once, on CPU, by the bundled all-MiniLM-L6-v2. Statements per second
are end to end: input statements / (embed + cluster + name) wall time; model loading is reported apart.
A second pass over the same statements with the now warm cache shows the cost of a re-run (identity runs).
Quality: NMI and ARI between system-level clusters and the template categories (templates.py), over all
statements ("other" counted as one extra label) and over the clustered ones only; plus coverage (share not
in "other"), and the share of noise statements that land in "other".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from benchmarks.clustering.templates import CATEGORIES, generate
from diagnosis.clustering.cluster import ClusterParams
from diagnosis.clustering.levels import cluster_per_node_and_system
from diagnosis.clustering.embeddings import Embedder
from diagnosis.clustering.naming import name_clusters
from diagnosis.clustering.pipeline import embed_statements
from diagnosis.clustering.statements import Statement, normalize_text


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _noise_in_category_clusters(labels: np.ndarray, pred: np.ndarray) -> float:
    """Share of noise statements that sit in a cluster whose majority is a real category (contamination)."""
    noise = labels < 0
    if not noise.any():
        return 0.0
    majority: dict[str, int] = {}
    for cid in set(pred[noise]) - {"<other>"}:
        labs = labels[pred == cid]
        vals, counts = np.unique(labs, return_counts=True)
        majority[cid] = int(vals[counts.argmax()])
    return float(np.mean([majority.get(c, -1) >= 0 for c in pred[noise]]))


def _quality(labels: np.ndarray, assignment: list[str | None]) -> dict[str, float]:
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    pred_all = np.array([a if a is not None else "<other>" for a in assignment])
    clustered = np.array([a is not None for a in assignment])
    labelled = labels >= 0
    keep = clustered & labelled
    return {
        "ari_all": float(adjusted_rand_score(labels[labelled], pred_all[labelled])),
        "nmi_all": float(normalized_mutual_info_score(labels[labelled], pred_all[labelled])),
        "ari_clustered": float(adjusted_rand_score(labels[keep], pred_all[keep])) if keep.any() else 0.0,
        "nmi_clustered": float(normalized_mutual_info_score(labels[keep], pred_all[keep])) if keep.any() else 0.0,
        "coverage": float(clustered[labelled].mean()),
        "noise_in_other": float((~clustered[~labelled]).mean()) if (~labelled).any() else 1.0,
        "noise_in_category_clusters": _noise_in_category_clusters(labels, pred_all),
    }


def _pipeline(statements: list[Statement], embedder: Embedder, params: ClusterParams) -> dict:
    t0 = time.perf_counter()
    computed_before = embedder.computed
    vectors, n_embedded = embed_statements(statements, embedder)
    t1 = time.perf_counter()
    multi = cluster_per_node_and_system(statements, vectors, params=params)
    t2 = time.perf_counter()
    texts = {s.id: s.text for s in statements}
    n_names = 0
    for clusters in [*multi.node_clusters.values(), multi.system_clusters]:
        n_names += len(name_clusters(clusters, texts))
    t3 = time.perf_counter()
    return {"multi": multi, "n_embedded": n_embedded, "n_computed": embedder.computed - computed_before,
            "embed_s": t1 - t0, "cluster_s": t2 - t1,
            "name_s": t3 - t2, "total_s": t3 - t0, "n_names": n_names}


def run_size(n: int, *, seed: int, batch_size: int, quantize: bool, threads: int | None) -> dict:
    gen = generate(n, seed=seed)
    statements = [Statement(id=str(i), text=g.text, node=g.node, trace_id=g.trace_id) for i, g in enumerate(gen)]
    labels = np.array([g.label for g in gen])
    rss_start = _rss_mb()
    embedder = Embedder(batch_size=batch_size, quantize=quantize, num_threads=threads)
    t = time.perf_counter()
    embedder.embed(["warm up the model"])
    load_s = time.perf_counter() - t
    rss_model = _rss_mb()
    params = ClusterParams()
    cold = _pipeline(statements, embedder, params)
    warm = _pipeline(statements, embedder, params)
    multi = cold["multi"]
    system = multi.system_result
    q = _quality(labels, [system.assignment[s.id] for s in statements])
    node_aris = []
    for node, res in multi.node_results.items():
        idx = [i for i, s in enumerate(statements) if s.node == node]
        node_aris.append((len(idx), _quality(labels[idx], [res.assignment[statements[i].id] for i in idx])["ari_all"]))
    return {
        "n": n,
        "distinct_texts": len({s.text for s in statements}),
        "distinct_normalised": len({normalize_text(s.text) for s in statements}),
        "embedded_texts": cold["n_computed"],
        "groups_after_near_dedup": system.n_groups,
        "units_linked": system.n_units,
        "model_load_s": round(load_s, 2),
        "embed_s": round(cold["embed_s"], 2),
        "cluster_s": round(cold["cluster_s"], 2),
        "name_s": round(cold["name_s"], 2),
        "total_s": round(cold["total_s"], 2),
        "statements_per_s": round(n / cold["total_s"], 1),
        "embedded_texts_per_s": round(cold["n_computed"] / cold["embed_s"], 1) if cold["embed_s"] else None,
        "warm_total_s": round(warm["total_s"], 2),
        "warm_statements_per_s": round(n / warm["total_s"], 1),
        "system_clusters": len(system.clusters),
        "categories": len(CATEGORIES),
        "node_clusters": sum(len(v) for v in multi.node_clusters.values()),
        "other": len(system.other),
        "links": sum(len(v) for v in multi.links.values()),
        **{k: round(v, 4) for k, v in q.items()},
        "node_ari_weighted": round(sum(c * a for c, a in node_aris) / max(sum(c for c, _ in node_aris), 1), 4),
        "peak_rss_mb": round(_rss_mb(), 1),
        "rss_after_model_mb": round(rss_model, 1),
        "rss_before_model_mb": round(rss_start, 1),
        "quantize": quantize,
        "batch_size": batch_size,
        "threads": embedder.num_threads,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quantize", action="store_true", help="int8 dynamic quantisation of the model")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help="append one JSON line per size to this file")
    args = ap.parse_args(argv)
    if args.child:
        result = run_size(args.sizes[0], seed=args.seed, batch_size=args.batch_size, quantize=args.quantize,
                          threads=args.threads)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    for n in args.sizes:
        cmd = [sys.executable, "-m", "benchmarks.clustering.run", "--child", "--sizes", str(n), "--seed",
               str(args.seed), "--batch-size", str(args.batch_size)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        if args.quantize:
            cmd.append("--quantize")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not lines:
            sys.stderr.write(proc.stderr[-4000:])
            return proc.returncode or 1
        result = json.loads(lines[-1][7:])
        print(json.dumps(result), flush=True)
        if args.out:
            with args.out.open("a") as fh:
                fh.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
