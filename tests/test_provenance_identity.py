"""What a result records of its data and machine: the corpus manifest's content hash leaves
out the build record (two byte-identical builds agree; any change of content does not), and
the CPU's model and vector instruction set are named."""

from __future__ import annotations

import json

from asyncpp.study import provenance
from asyncpp.train.components import _manifest_content_sha256

MANIFEST = {"corpus": "debdocs-v1", "builder": "asyncpp-corpus 1", "command": "asyncpp-corpus "
            "build --out /home/a/data", "built_utc": "2026-11-01T10:00:00Z", "build_s": 412.5,
            "shards": [{"file": "debdocs_train_000001.bin", "sha256": "ab" * 32}],
            "totals": {"train_tokens": 30332934}}


def test_the_content_hash_ignores_the_build_record_and_sees_the_content(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(MANIFEST, indent=2))
    rebuilt = {**MANIFEST, "built_utc": "2026-12-04T12:00:00Z", "build_s": 380.0,
               "command": "asyncpp-corpus build --out data/debdocs --download"}
    b.write_text(json.dumps(rebuilt))  # another layout of the JSON, too
    other = {**MANIFEST, "shards": [{"file": "debdocs_train_000001.bin", "sha256": "cd" * 32}]}
    c.write_text(json.dumps(other, indent=2))
    assert a.read_bytes() != b.read_bytes()
    assert _manifest_content_sha256(a) == _manifest_content_sha256(b)
    assert _manifest_content_sha256(a) != _manifest_content_sha256(c)
    assert _manifest_content_sha256(None) is None


def test_the_machine_is_named_by_model_and_instruction_set():
    assert provenance.cpu_model()
    isa = provenance.cpu_isa()
    assert isa is None or isa in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256"} or \
        isa.isupper()
