"""Reads every Parquet file of an outputs folder with polars, DuckDB and pyarrow and checks it against
`tgrag schema --json`: column names and order, types, required columns without nulls, fixed value sets,
and the key-value metadata (table, schema version, docs, dataset, cache key = the stage manifest's
fingerprint, commit = the binary's). Then runs every `python` and `sh` block of docs/outputs.md as
written, from the folder holding `outputs/`.

Usage: outputs_check.py TGRAG_BINARY WORKDIR DOC  (WORKDIR/outputs is the outputs folder of a run)
Run by the cli test `outputs::a_tiny_run_shows_every_family_and_its_tables_read_in_polars_and_duckdb` in the small
venv `.venv-outputs` (pinned polars, duckdb, pyarrow; `make test` installs it).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq

TGRAG, WORK, DOC = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve()
OUT = WORK / "outputs"
errors = []


def fail(path, msg):
    errors.append(f"{path.relative_to(WORK)}: {msg}")


SCALAR = {
    "uint8": (pl.UInt8, "UTINYINT"),
    "uint32": (pl.UInt32, "UINTEGER"),
    "uint64": (pl.UInt64, "UBIGINT"),
    "int32": (pl.Int32, "INTEGER"),
    "int64": (pl.Int64, "BIGINT"),
    "float32": (pl.Float32, "FLOAT"),
    "float64": (pl.Float64, "DOUBLE"),
    "bool": (pl.Boolean, "BOOLEAN"),
    "utf8": (pl.String, "VARCHAR"),
}


def expected(ty):
    """(check of a polars dtype, DuckDB type name, fixed width or None) for a `tgrag schema --json` type."""
    if ty in SCALAR:
        p, d = SCALAR[ty]
        return (lambda t: t == p), d, None
    m = re.fullmatch(r"list<(\w+)>", ty)
    if m:
        p, d = SCALAR[m.group(1)]
        return (lambda t: t == pl.List(p)), d + "[]", None
    m = re.fullmatch(r"fixed_size_list<float32, (\d+|\*)>", ty)
    if m:
        width = None if m.group(1) == "*" else int(m.group(1))
        ok = lambda t: isinstance(t, pl.Array) and t.inner == pl.Float32 and (width is None or t.size == width)
        return ok, "FLOAT[]", width
    raise SystemExit(f"unknown type in tgrag schema --json: {ty}")


schema = json.loads(subprocess.run([TGRAG, "schema", "--json"], check=True, capture_output=True, text=True).stdout)
specs = {t["name"]: t for t in schema["tables"]}
keys = schema["metadata_keys"]
assert keys[:4] == ["tgrag.table", "tgrag.schema_version", "tgrag.doc", "tgrag.columns"], keys

files = sorted(OUT.glob("*/*/*.parquet"))
assert files, f"no Parquet file under {OUT}"
con = duckdb.connect()
seen_tables = set()
for f in files:
    dataset, stage, table = f.parent.parent.name, f.parent.name, f.stem
    spec = specs.get(table)
    if spec is None:
        fail(f, f"`{table}` is not a table `tgrag schema` declares")
        continue
    seen_tables.add(table)
    cols = spec["columns"]
    names = [c["name"] for c in cols]
    # polars, lazily, then the whole file.
    lazy = pl.scan_parquet(f)
    got = lazy.collect_schema()
    df = lazy.collect()
    if list(got.names()) != names:
        fail(f, f"polars columns {list(got.names())} != {names}")
        continue
    # DuckDB.
    described = con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [str(f)]).fetchall()
    duck = {r[0]: r[1] for r in described}
    if [r[0] for r in described] != names:
        fail(f, f"DuckDB columns {[r[0] for r in described]} != {names}")
        continue
    (rows,) = con.execute("SELECT count(*) FROM read_parquet(?)", [str(f)]).fetchone()
    if rows != df.height:
        fail(f, f"DuckDB reads {rows} rows, polars {df.height}")
    for c in cols:
        ok, duck_type, width = expected(c["type"])
        if not ok(got[c["name"]]):
            fail(f, f"column {c['name']}: polars type {got[c['name']]}, schema says {c['type']}")
        if duck[c["name"]] != duck_type:
            fail(f, f"column {c['name']}: DuckDB type {duck[c['name']]}, expected {duck_type} for {c['type']}")
        if width is not None and df.height:
            (lo, hi) = con.execute(f'SELECT min(len("{c["name"]}")), max(len("{c["name"]}")) FROM read_parquet(?)', [str(f)]).fetchone()
            if (lo, hi) != (width, width):
                fail(f, f"column {c['name']}: DuckDB list lengths {lo}..{hi}, schema width {width}")
        if not c["nullable"] and df[c["name"]].null_count():
            fail(f, f"required column {c['name']} has {df[c['name']].null_count()} nulls")
        if c["values"] is not None:
            outside = set(df[c["name"]].drop_nulls().unique().to_list()) - set(c["values"])
            if outside:
                fail(f, f"column {c['name']}: values {sorted(outside)} outside {c['values']}")
    # Key-value metadata, the same through all three readers.
    arrow_meta = {k.decode(): v.decode() for k, v in (pq.read_metadata(f).metadata or {}).items() if k != b"ARROW:schema"}
    polars_meta = {k: v for k, v in pl.read_parquet_metadata(f).items() if k != "ARROW:schema"}
    # DuckDB lists the entries in file order (pyarrow's and polars' dicts need not).
    duck_rows = con.execute("SELECT decode(key), decode(value) FROM parquet_kv_metadata(?)", [str(f)]).fetchall()
    duck_meta = {k: v for k, v in duck_rows if k != "ARROW:schema"}
    if not (arrow_meta == polars_meta == duck_meta):
        fail(f, f"metadata differs between readers: pyarrow {arrow_meta}, polars {polars_meta}, DuckDB {duck_meta}")
    manifest = json.loads((f.parent / "manifest.json").read_text())
    want = dict(spec["metadata"])
    want.update({"tgrag.dataset": dataset, "tgrag.cache_key": manifest["fingerprint"], "tgrag.commit": schema["commit"]})
    if arrow_meta != want:
        fail(f, f"metadata {arrow_meta} != expected {want}")
    order = [k for k, _ in duck_rows if k != "ARROW:schema"]
    if order != [k for k in keys if k in arrow_meta]:
        fail(f, f"metadata keys in order {order}, expected the order of {keys}")
    if list(json.loads(arrow_meta.get("tgrag.columns", "{}"))) != names:
        fail(f, f"tgrag.columns does not list the columns in file order: {arrow_meta.get('tgrag.columns')}")

print(f"{len(files)} Parquet files, {len(seen_tables)} tables: read by polars, DuckDB and pyarrow against tgrag schema")

# The examples of docs/outputs.md, as written.
blocks = re.findall(r"^```(\w+)\n(.*?)^```", DOC.read_text(), re.S | re.M)
ran = 0
with tempfile.TemporaryDirectory() as bindir:
    os.symlink(TGRAG, Path(bindir) / "tgrag")
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    for i, (lang, code) in enumerate(blocks):
        if lang == "python":
            cmd = [sys.executable, "-c", code]
        elif lang == "sh":
            cmd = ["bash", "-euo", "pipefail", "-c", code]
        else:
            continue
        r = subprocess.run(cmd, cwd=WORK, env=env, capture_output=True, text=True)
        ran += 1
        if r.returncode != 0:
            errors.append(f"docs/outputs.md block {i + 1} ({lang}) failed:\n{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
print(f"{ran} examples of {DOC.name} ran")
if ran < 5:
    errors.append(f"only {ran} runnable examples found in {DOC}")

if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(1)
