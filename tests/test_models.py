"""Models: shapes and parameter counts of the named configs, the forward's pieces (RoPE, GQA,
RMSNorm), pipeline splitting as a module-dict operation, optimizer routing, HF export."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from asyncpp.models import (
    MODEL_CONFIGS,
    ModelConfig,
    apply_rope,
    build_model,
    get_model_config,
    partition_layers,
    rope_tables,
    split_stage,
    stage_named_parameters,
)
from asyncpp.optim import split_muon_params

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name,expected", [
    ("smollm-135m", 134_515_008),
    ("smollm-360m", 361_821_120),
])
def test_smollm_parameter_counts_on_meta(name, expected):
    model = build_model(name, device="meta")
    n = sum(p.numel() for p in model.parameters())
    assert n == expected == MODEL_CONFIGS[name].num_params()
    assert abs(n - {"smollm-135m": 134.5e6, "smollm-360m": 361.8e6}[name]) < 0.1e6
    assert all(p.is_meta for p in model.parameters())


def test_named_config_sizes():
    counts = {n: build_model(n, device="meta").num_params() for n in MODEL_CONFIGS}
    assert counts["tiny"] < 1_000_000
    assert 1_000_000 < counts["small"] < 10_000_000
    assert counts["moe-tiny"] < 1_000_000
    # moe-10b: ≈10B total, ≈1.6B active per token (top-8 of 64 experts).
    assert abs(counts["moe-10b"] - 10.0e9) < 0.1e9
    assert counts["moe-10b"] == MODEL_CONFIGS["moe-10b"].num_params()
    active = MODEL_CONFIGS["moe-10b"].num_params(active=True)
    assert 1.5e9 < active < 1.6e9


def test_smollm_shapes_match_paper():
    c = MODEL_CONFIGS["smollm-360m"]
    assert (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.ffn_dim, c.vocab_size) == \
        (32, 960, 15, 5, 2560, 49152)
    assert c.norm_eps == 1e-5 and c.tie_embeddings
    model = build_model(c, device="meta")
    assert not any(".bias" in n for n, _ in model.named_parameters())


@pytest.mark.parametrize("bad,msg", [
    (dict(dim=65), "divisible"),
    (dict(n_kv_heads=3), "n_kv_heads"),
    (dict(n_experts=2, top_k=3), "top_k"),
    (dict(n_layers=0), "n_layers"),
])
def test_model_config_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        get_model_config("tiny", **bad)
    with pytest.raises(ValueError, match="unknown model"):
        get_model_config("huge")


def test_forward_shapes_and_initial_loss():
    torch.manual_seed(0)
    model = build_model("tiny", seed=0)
    x = torch.randint(0, 512, (3, 17))
    logits = model(x)
    assert logits.shape == (3, 17, 512)
    y = torch.randint(0, 512, (3, 17))
    loss = F.cross_entropy(logits.reshape(-1, 512), y.reshape(-1))
    assert abs(loss.item() - math.log(512)) < 0.1  # near-uniform predictions at init
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, 257, dtype=torch.long))


def test_rmsnorm_and_rope_equations():
    from asyncpp.models import RMSNorm

    x = torch.randn(2, 5, 8, dtype=torch.float64)
    n = RMSNorm(8, eps=1e-5).double()
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(n(x), ref)
    # RoPE: <R_m q, R_n k> depends only on m - n, and norms are preserved.
    cos, sin = rope_tables(8, 16, 10000.0)
    q = torch.randn(1, 1, 1, 8).expand(1, 16, 1, 8)
    k = torch.randn(1, 1, 1, 8).expand(1, 16, 1, 8)
    rq, rk = apply_rope(q, cos, sin)[0, :, 0], apply_rope(k, cos, sin)[0, :, 0]
    torch.testing.assert_close(rq.norm(dim=-1), q[0, :, 0].norm(dim=-1))
    dots = rq @ rk.t()
    torch.testing.assert_close(dots[3, 1], dots[12, 10], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dots[5, 5], dots[0, 0], atol=1e-5, rtol=1e-5)


def test_gqa_attention_matches_explicit_reference():
    model = build_model("tiny", seed=1).double()
    attn = model.layers["0"].attention
    x = torch.randn(2, 9, 64, dtype=torch.float64)
    B, T, H, Hk, d = 2, 9, 4, 2, 16
    cos, sin = rope_tables(d, T, 10000.0)
    q = apply_rope(attn.wq(x).view(B, T, H, d), cos.double(), sin.double()).transpose(1, 2)
    k = apply_rope(attn.wk(x).view(B, T, Hk, d), cos.double(), sin.double()).transpose(1, 2)
    v = attn.wv(x).view(B, T, Hk, d).transpose(1, 2)
    k, v = k.repeat_interleave(H // Hk, 1), v.repeat_interleave(H // Hk, 1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    ref = attn.wo((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * d))
    torch.testing.assert_close(attn(x), ref)


def test_partition_is_balanced_and_checked():
    assert [list(r) for r in partition_layers(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [len(r) for r in partition_layers(30, 4)] == [8, 8, 7, 7]
    with pytest.raises(ValueError, match="exceeds model.n_layers"):
        partition_layers(2, 3)


@pytest.mark.parametrize("name", ["tiny", "moe-tiny"])
def test_split_stages_compose_to_the_whole_model(name):
    cfg = get_model_config(name).replace(n_layers=3)
    model = build_model(cfg, seed=5).eval()
    x = torch.randint(0, cfg.vocab_size, (2, 11))
    with torch.no_grad():
        whole = model(x)
        h = x
        for s in range(3):
            stage = split_stage(copy.deepcopy(model), s, 3)
            assert (stage.tok_embeddings is None) == (s != 0)
            assert (stage.output is None) == (s != 2)
            h = stage(h)
    torch.testing.assert_close(h, whole, rtol=0, atol=0)


def test_init_is_independent_of_the_split():
    """A stage built on meta and initialised alone equals the same layers of the whole model."""
    whole = build_model("tiny", seed=7)
    stage = split_stage(build_model("tiny", device="meta"), 1, 2)
    stage.to_empty(device="cpu")
    stage.init_weights(seed=7)
    for k, v in stage.state_dict().items():
        torch.testing.assert_close(v, whole.state_dict()[k], rtol=0, atol=0)
    # tied head on the last stage = the embedding of the whole model
    torch.testing.assert_close(stage.output.weight, whole.tok_embeddings.weight, rtol=0, atol=0)


def test_pipeline_layers_feed_the_executor_partition():
    partition = pytest.importorskip("asyncpp.pipeline.stages")
    model = build_model("tiny", seed=2).eval()
    layers = model.pipeline_layers()
    assert [n for n, _ in layers] == ["tok_embeddings", "layers.0", "layers.1", "norm", "output"]
    stages = partition.build_stages(layers, 2)
    x = torch.randint(0, 512, (2, 8))
    with torch.no_grad():
        h = x
        for st in stages:
            h = st(h)
        torch.testing.assert_close(h, model(x), rtol=0, atol=0)
    names = {n for st in stages for n, _ in st.named_parameters()}
    assert names <= set(model.state_dict())
    # the simulation's partition, expressed as executor boundaries: same parameters per stage
    from asyncpp.models import pipeline_boundaries

    big = build_model(get_model_config("tiny").replace(n_layers=5), device="meta")
    b = pipeline_boundaries(5, 3)
    assert b == [0, 3, 5, 8]
    ours = stage_named_parameters(big, 3)
    for s, st in enumerate(partition.build_stages(big.pipeline_layers(), 3, boundaries=b)):
        tied_copy = set(st.tied_parameters) if s > 0 else set()  # the head's copy of the tie
        theirs = {n for n, _ in st.named_parameters()} - tied_copy
        assert theirs == {n for n, _ in ours[s]}


def test_stage_parameter_groups_cover_the_model_once():
    model = build_model(get_model_config("tiny").replace(n_layers=4), device="meta")
    groups = stage_named_parameters(model, 3)
    names = [n for g in groups for n, _ in g]
    assert len(names) == len(set(names)) == len(list(model.named_parameters()))
    assert groups[0][0][0] == "tok_embeddings.weight"  # tied head counted once, on stage 0
    assert groups[-1][-1][0] == "norm.weight"
    assert {n.split(".")[1] for n in names if n.startswith("layers.")} == {"0", "1", "2", "3"}


@pytest.mark.parametrize("name", ["tiny", "moe-tiny"])
def test_muon_routing_by_parameter_name(name):
    model = build_model(get_model_config(name).replace(tie_embeddings=False), device="meta")
    muon, other = split_muon_params(model.named_parameters())
    ids = {id(p) for p in muon}
    named = dict(model.named_parameters())
    assert id(named["tok_embeddings.weight"]) not in ids
    assert id(named["output.weight"]) not in ids
    assert id(named["layers.0.attention.wq.weight"]) in ids
    assert all(p.ndim == 1 for n, p in named.items() if id(p) not in ids
               and n not in ("tok_embeddings.weight", "output.weight")
               and not n.endswith("router.weight"))
    if name == "moe-tiny":
        # the router is a (E, dim) scoring matrix, not a hidden layer: AdamW side
        assert id(named["layers.0.feed_forward.router.weight"]) not in ids
        w1 = named["layers.0.feed_forward.experts.w1"]
        assert w1.ndim == 3 and id(w1) in ids  # orthogonalized per expert


def test_hf_export_round_trip(tmp_path):
    transformers = pytest.importorskip("transformers")
    from asyncpp.models import export_hf

    for tie in (True, False):
        cfg = ModelConfig(name="t", vocab_size=300, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                          ffn_dim=64, max_seq_len=64, tie_embeddings=tie)
        model = build_model(cfg, seed=11).eval()
        out = export_hf(model, tmp_path / f"tie{tie}", eos_token_id=0)
        hf = transformers.LlamaForCausalLM.from_pretrained(out).eval()
        x = torch.randint(0, 300, (2, 13))
        with torch.no_grad():
            torch.testing.assert_close(hf(x).logits, model(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="dense models only"):
        export_hf(build_model("moe-tiny"), tmp_path / "moe")
