"""Write a tiny random-weight Qwen3-MoE checkpoint that SGLang can serve, with no hub access.

    python make_tiny_moe.py OUT_DIR

Two decoder layers, 8 experts, 2 chosen per token, hidden size 256, bf16 weights in one
safetensors file with the per-expert names Hugging Face uses, and a byte-level BPE tokenizer
trained here on this Python's standard library sources. The weights are random (seed 0): the
server runs every kernel a real MoE model does, but what it writes is not language. Used by the
GPU run (scripts/gpu-run/, docs/testing.md), never by the roles.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB = 2048          # embedding rows; the tokenizer gets a few less
HIDDEN = 256
LAYERS = 2
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64
EXPERTS, TOP_K, EXPERT_FFN = 8, 2, 128
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tokenizer(out: Path) -> int:
    sources = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:200]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train([str(path) for path in sources], trainers.BpeTrainer(
        vocab_size=VOCAB - 48, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096,
        "eos_token": SPECIAL[0], "pad_token": SPECIAL[0], "bos_token": None,
        "clean_up_tokenization_spaces": False}, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": SPECIAL[0], "pad_token": SPECIAL[0]}, indent=2) + "\n")
    return tok.token_to_id(SPECIAL[0])


def config(out: Path, eos: int) -> None:
    (out / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 512,
        "moe_intermediate_size": EXPERT_FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "num_experts": EXPERTS, "num_experts_per_tok": TOP_K, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "norm_topk_prob": True, "max_position_embeddings": 4096,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "attention_bias": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": eos, "eos_token_id": eos, "do_sample": False}) + "\n")


def weights(out: Path) -> int:
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float16)

    def ones(size: int) -> np.ndarray:
        return np.ones((size,), dtype=np.float16)

    tensors = {"model.embed_tokens.weight": rand(VOCAB, HIDDEN), "model.norm.weight": ones(HIDDEN),
               "lm_head.weight": rand(VOCAB, HIDDEN)}
    for layer in range(LAYERS):
        pre = f"model.layers.{layer}."
        tensors.update({
            pre + "input_layernorm.weight": ones(HIDDEN),
            pre + "post_attention_layernorm.weight": ones(HIDDEN),
            pre + "self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
            pre + "self_attn.k_proj.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN),
            pre + "self_attn.v_proj.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN),
            pre + "self_attn.o_proj.weight": rand(HIDDEN, HEADS * HEAD_DIM),
            pre + "self_attn.q_norm.weight": ones(HEAD_DIM),
            pre + "self_attn.k_norm.weight": ones(HEAD_DIM),
            pre + "mlp.gate.weight": rand(EXPERTS, HIDDEN),
        })
        for expert in range(EXPERTS):
            exp = f"{pre}mlp.experts.{expert}."
            tensors[exp + "gate_proj.weight"] = rand(EXPERT_FFN, HIDDEN)
            tensors[exp + "up_proj.weight"] = rand(EXPERT_FFN, HIDDEN)
            tensors[exp + "down_proj.weight"] = rand(HIDDEN, EXPERT_FFN)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return sum(int(t.size) for t in tensors.values())


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    eos = tokenizer(out)
    config(out, eos)
    print(f"wrote {out}: {weights(out)} parameters, end-of-text id {eos}")


if __name__ == "__main__":
    main()
