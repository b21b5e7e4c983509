//! Every canonical table. Loaders produce them, stages consume and produce them, `tgrag schema` prints
//! them. Families: knowledge base (STaRK-like), graph QA (one small textual graph per question),
//! text-attributed graphs (TopoRAG), and results (runs, metrics, timings).

use crate::table::{ColType::*, TableSpec, opt, req};

/// Knowledge-base nodes; `node_id` is dense (0..N) in every table tgrag writes.
pub const NODES: TableSpec = TableSpec {
    name: "nodes",
    version: 1,
    family: "knowledge base",
    doc: "One row per entity of a text-rich knowledge base.",
    columns: &[
        req("node_id", U32, "entity id, unique"),
        req("node_type", Utf8, "entity type (product, paper, gene, ...)"),
        req("name", Utf8, "entity name as it may appear in a query"),
        req("doc", Utf8, "the entity's document (STaRK get_doc_info text)"),
    ],
};

/// Typed knowledge-base edges (directed as stored; methods decide how to traverse them).
pub const EDGES: TableSpec = TableSpec {
    name: "edges",
    version: 1,
    family: "knowledge base",
    doc: "One row per typed relation between two existing nodes.",
    columns: &[
        req("src", U32, "source node_id"),
        req("dst", U32, "destination node_id"),
        req("relation", Utf8, "relation type"),
    ],
};

/// Queries over a knowledge base.
pub const QUERIES: TableSpec = TableSpec {
    name: "queries",
    version: 1,
    family: "knowledge base",
    doc: "Natural-language queries with their split; pattern/hops where the dataset knows them.",
    columns: &[
        req("query_id", U32, "query id, unique"),
        req("text", Utf8, "the query"),
        req("split", Utf8, "train | val | test"),
        opt("pattern", Utf8, "logical pattern, e.g. `institution>author>paper+text`"),
        opt("hops", U8, "number of relation hops of the pattern"),
    ],
};

/// Gold answers of knowledge-base queries.
pub const ANSWERS: TableSpec = TableSpec {
    name: "answers",
    version: 1,
    family: "knowledge base",
    doc: "One row per (query, gold answer node).",
    columns: &[req("query_id", U32, "an existing query_id"), req("node_id", U32, "an existing node_id")],
};

/// Candidate node types of a knowledge base (STaRK: Amazon products, MAG papers, Prime all).
pub const CANDIDATE_TYPES: TableSpec = TableSpec {
    name: "candidate_types",
    version: 1,
    family: "knowledge base",
    doc: "Node types whose nodes are ranking candidates; absent or empty means every node.",
    columns: &[req("node_type", Utf8, "a node type")],
};

/// Nodes of the small per-question graphs of graph QA (ExplaGraphs, SceneGraphs, WebQSP).
pub const GRAPH_NODES: TableSpec = TableSpec {
    name: "graph_nodes",
    version: 1,
    family: "graph QA",
    doc: "Nodes of one small textual graph per question.",
    columns: &[
        req("graph_id", U32, "graph (= question) id"),
        req("node_id", U32, "node id, unique within its graph"),
        req("text", Utf8, "node text"),
    ],
};

/// Edges of the per-question graphs.
pub const GRAPH_EDGES: TableSpec = TableSpec {
    name: "graph_edges",
    version: 1,
    family: "graph QA",
    doc: "Textual edges of one small graph per question.",
    columns: &[
        req("graph_id", U32, "graph id"),
        req("src", U32, "source node_id within the graph"),
        req("dst", U32, "destination node_id within the graph"),
        req("text", Utf8, "edge text (relation)"),
    ],
};

/// Questions of graph QA.
pub const QA: TableSpec = TableSpec {
    name: "qa",
    version: 1,
    family: "graph QA",
    doc: "One question per graph with its answer or label.",
    columns: &[
        req("graph_id", U32, "graph id, unique"),
        req("question", Utf8, "the question"),
        req("answer", Utf8, "answer text or class label"),
        req("split", Utf8, "train | val | test"),
    ],
};

/// Nodes of a text-attributed graph (TopoRAG).
pub const TAG_NODES: TableSpec = TableSpec {
    name: "tag_nodes",
    version: 2,
    family: "text-attributed graph",
    doc: "Nodes with text, label, optional time and the observed/partial split.",
    columns: &[
        req("node_id", U32, "node id, unique"),
        req("text", Utf8, "full node text"),
        opt("key", Utf8, "the dataset's own node id (paper id, e-mail address)"),
        opt("label", Utf8, "class label"),
        opt("time", I64, "timestamp or year, when the dataset has one"),
        opt("split", Utf8, "observed | partial (TopoRAG §6.1.1), when already split"),
    ],
};

/// Edges of a text-attributed graph.
pub const TAG_EDGES: TableSpec = TableSpec {
    name: "tag_edges",
    version: 1,
    family: "text-attributed graph",
    doc: "Edges between existing tag_nodes (undirected graphs store each edge once).",
    columns: &[req("src", U32, "source node_id"), req("dst", U32, "destination node_id")],
};

/// E-mails of an e-mail graph (Enron): the texts that live on the people graph's edges.
pub const EMAILS: TableSpec = TableSpec {
    name: "emails",
    version: 1,
    family: "text-attributed graph",
    doc: "One row per e-mail; sender and recipients are tag_nodes (people).",
    columns: &[
        req("email_id", U32, "e-mail id, unique (input order)"),
        req("file", Utf8, "where the message came from (maildir path)"),
        req("sender", U32, "the From address, a tag_nodes node_id"),
        req("recipients", ListU32, "To and Cc addresses in header order, tag_nodes node_ids"),
        opt("time", I64, "Date header as Unix seconds (UTC)"),
        req("subject", Utf8, "Subject header"),
        req("body", Utf8, "message body"),
    ],
};

/// A ranked retrieval run.
pub const RUN: TableSpec = TableSpec {
    name: "run",
    version: 1,
    family: "results",
    doc: "Ranked candidates per query; trajectory columns are filled by graph methods (MoR).",
    columns: &[
        req("query_id", U32, "query id"),
        req("node_id", U32, "retrieved node"),
        req("rank", U32, "1-based rank"),
        req("score", F32, "retrieval score (higher is better)"),
        req("method", Utf8, "method name (bm25, dense, mor, ...)"),
        opt("path", ListU32, "trajectory: node ids from seed to candidate"),
        opt("path_types", ListUtf8, "trajectory: node types along the path"),
        opt("path_scores", ListF32, "trajectory: BM25 score of each node on the path"),
        opt("traversal_id", U8, "which planned path reached the node first"),
        opt("dense_score", F32, "dense (embedding) score of the candidate"),
    ],
};

/// Per-query retrieval metrics.
pub const METRICS_PER_QUERY: TableSpec = TableSpec {
    name: "per_query",
    version: 1,
    family: "results",
    doc: "STaRK evaluator metrics of one method on one query.",
    columns: &[
        req("method", Utf8, "method name"),
        req("query_id", U32, "query id"),
        req("split", Utf8, "query split"),
        opt("pattern", Utf8, "logical pattern"),
        opt("hops", U8, "hop count"),
        req("num_answers", U32, "number of gold answers"),
        req("hit1", F64, "hit@1"),
        req("hit5", F64, "hit@5"),
        req("recall20", F64, "recall@20 (0 without answers)"),
        req("mrr", F64, "reciprocal rank of the first answer over the full candidate list"),
    ],
};

/// Aggregated retrieval metrics.
pub const METRICS_AGGREGATE: TableSpec = TableSpec {
    name: "aggregate",
    version: 1,
    family: "results",
    doc: "Mean metrics grouped by method and one of: all, split, pattern, hops.",
    columns: &[
        req("method", Utf8, "method name"),
        req("group_by", Utf8, "all | split | pattern | hops"),
        req("group_value", Utf8, "the group's value (`*` for all)"),
        req("n_queries", U64, "queries in the group"),
        req("hit1", F64, "mean hit@1"),
        req("hit5", F64, "mean hit@5"),
        req("recall20", F64, "mean recall@20"),
        req("mrr", F64, "mean MRR"),
    ],
};

/// A persisted BM25 index: one row per index (the global one and one per node type).
pub const BM25_INDEX: TableSpec = TableSpec {
    name: "bm25_index",
    version: 1,
    family: "indexes",
    doc: "Parameters and statistics of each persisted BM25 index (scope `*` = all nodes, else a node type).",
    columns: &[
        req("scope", Utf8, "`*` for the global index, else the node type it covers"),
        req("num_docs", U32, "documents (nodes) in the index"),
        req("vocab_size", U32, "distinct terms"),
        req("avg_doc_len", F32, "mean document length in tokens"),
        req("k1", F32, "BM25 k1"),
        req("b", F32, "BM25 b"),
        req("variant", Utf8, "lucene | okapi"),
        req("tokenizer", Utf8, "bm25s | simple"),
    ],
};

/// Terms of the persisted BM25 indexes.
pub const BM25_TERMS: TableSpec = TableSpec {
    name: "bm25_terms",
    version: 1,
    family: "indexes",
    doc: "The vocabulary of each BM25 index, in term-id order (first occurrence in node-id order).",
    columns: &[
        req("scope", Utf8, "index scope (see bm25_index)"),
        req("term_id", U32, "term id within the scope"),
        req("term", Utf8, "the token"),
        req("df", U32, "document frequency"),
        req("idf", F32, "idf of the index's variant (recomputed on load; here for readers)"),
    ],
};

/// Postings of the persisted BM25 indexes.
pub const BM25_POSTINGS: TableSpec = TableSpec {
    name: "bm25_postings",
    version: 1,
    family: "indexes",
    doc: "One row per (term, document) pair: the inverted lists, by term then node id.",
    columns: &[
        req("scope", Utf8, "index scope (see bm25_index)"),
        req("term_id", U32, "term id within the scope"),
        req("node_id", U32, "document (node)"),
        req("tf", U32, "term frequency in the document"),
    ],
};

/// Documents of the persisted BM25 indexes.
pub const BM25_DOCS: TableSpec = TableSpec {
    name: "bm25_docs",
    version: 1,
    family: "indexes",
    doc: "The documents of each BM25 index in index order (node id ascending) with their lengths.",
    columns: &[
        req("scope", Utf8, "index scope (see bm25_index)"),
        req("node_id", U32, "document (node)"),
        req("len", U32, "document length in tokens"),
    ],
};

/// Wall-clock timings of a stage; kept apart so that result tables stay byte-identical.
pub const TIMINGS: TableSpec = TableSpec {
    name: "timings",
    version: 1,
    family: "results",
    doc: "Seconds spent per phase of a stage run (differs between runs by nature).",
    columns: &[
        req("stage", Utf8, "stage name"),
        req("phase", Utf8, "phase within the stage"),
        req("seconds", F64, "wall-clock seconds"),
        opt("items", U64, "items processed in the phase"),
    ],
};

/// All canonical tables, in documentation order.
pub const ALL: &[&TableSpec] = &[
    &NODES,
    &EDGES,
    &QUERIES,
    &ANSWERS,
    &CANDIDATE_TYPES,
    &GRAPH_NODES,
    &GRAPH_EDGES,
    &QA,
    &TAG_NODES,
    &TAG_EDGES,
    &EMAILS,
    &RUN,
    &BM25_INDEX,
    &BM25_TERMS,
    &BM25_POSTINGS,
    &BM25_DOCS,
    &METRICS_PER_QUERY,
    &METRICS_AGGREGATE,
    &TIMINGS,
];

/// Looks a table up by name.
pub fn by_name(name: &str) -> crate::Result<&'static TableSpec> {
    ALL.iter().copied().find(|t| t.name == name).ok_or_else(|| crate::SchemaError::UnknownTable(name.to_string()))
}
