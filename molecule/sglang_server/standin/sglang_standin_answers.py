"""Stand-in answers and tactics for the stand-in SGLang server (tests only, never shipped).

What it stands for: a real server's greedy answers, and FlashInfer's tuned MoE tactics, some of
which corrupt generations on RTX PRO 6000 (flashinfer-ai/flashinfer#4841). No model runs here, so:

- Answers: a prompt of the shipped set (STANDIN_ETC/prompts.json, a copy of
  roles/sglang_answers/files/prompts.json that the test puts there) gets its expected answer; a
  long one gets fluent text drawn from the prompt alone, so it is the same on every call. Like a
  real batching engine, the tail of a long answer differs between calls (from word 48 on), and a
  few prompts (1 in 25, by their hash) leave the first answer's words early, as a near-tie does.
- Tactics: STANDIN_ETC/autotune.json says what tuning picks for the cutlass MoE ops
  (trtllm::fused_moe::gemm1 and gemm2): {"tactic": "good"}, {"tactic": "corrupt", "rate": 0.1}
  (that share of generations, by prompt hash, becomes a run of "!"), or {"tactic": "drift"} (short
  answers still right, every long one fluent and different: only a reference shows it). The tactics go into the autotune cache file, so a pushed cache
  carries them as a real one would; --flashinfer-autotune-skip-ops leaves an op untuned (good),
  and no autotune (the gate, --disable-flashinfer-autotune) means no tuned tactic at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

ETC = Path(os.environ.get("STANDIN_ETC", "/etc/sglang-standin"))
MOE_OPS = ("trtllm::fused_moe::gemm1", "trtllm::fused_moe::gemm2")
TAIL_FROM = 48
EARLY_ONE_IN = 25
WORDS = (
    "the a river light stone city people water early late small large mountain field road market "
    "history engine bridge forest island winter summer letter paper glass iron wood metal garden "
    "house school teacher student farmer builder sailor doctor story song voice window door table "
    "bread salt fire wind rain snow cloud sun moon star north south east west careful quiet bright "
    "heavy simple clear strong gentle ancient modern useful common rare slowly quickly often always "
    "never together because although while after before during across through under over between "
    "carries shapes builds moves holds turns grows changes follows opens closes finds keeps makes "
    "shows gives takes measures protects connects reaches explains teaches remembers"
).split()


def _unit(text: str) -> float:
    """A number in [0, 1) fixed by the text."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) / 16 ** 12


def _fluent(seed: str, words: int, salt: str = "") -> str:
    """Sentences of ordinary words: no run, no loop; the same for the same seed (and salt)."""
    stable = random.Random(seed)
    tail = random.Random(seed + "|" + salt) if salt else stable
    early = salt and _unit("early|" + seed) < 1 / EARLY_ONE_IN
    out: list[str] = []
    while len(out) < words:
        source = tail if salt and (early and len(out) >= 6 or len(out) >= TAIL_FROM) else stable
        length = source.randint(8, 14)
        sentence = [source.choice(WORDS) for _ in range(length)]
        sentence[0] = sentence[0].capitalize()
        out += sentence[:-1] + [sentence[-1] + "."]
    return " ".join(out[:words])


def load_prompts() -> dict[str, dict]:
    path = ETC / "prompts.json"
    if not path.is_file():
        return {}
    return {p["prompt"]: p for p in json.loads(path.read_text(encoding="utf-8"))["prompts"]}


def tuned_tactics(skip_ops: list[str]) -> dict[str, dict]:
    """What a tuning run picks for each MoE op (written into the cache file)."""
    path = ETC / "autotune.json"
    chosen = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"tactic": "good"}
    return {op: ({"tactic": "heuristic"} if op in skip_ops else dict(chosen)) for op in MOE_OPS}


def bad_tactic(tactics: dict[str, dict]) -> dict | None:
    return next((t for t in tactics.values() if t.get("tactic") in ("corrupt", "drift")), None)


def answer(prompt: str, max_tokens: int, tactics: dict[str, dict], known: dict[str, dict]) -> str:
    """The completion this stand-in gives, with the tactics this start runs."""
    bad = bad_tactic(tactics)
    if bad and bad["tactic"] == "corrupt" and _unit("corrupt|" + prompt) < float(bad.get("rate", 0.1)):
        return "!" * max_tokens
    entry = known.get(prompt)
    if bad and bad["tactic"] == "drift" and not (entry and entry.get("expect")):
        return " " + _fluent("drift|" + prompt, min(max_tokens, 200))
    salt = os.urandom(4).hex()
    if entry and entry.get("expect"):
        wanted = entry["expect"][0]
        if entry["kind"] == "code":
            return f"{wanted}(x):\n    return x\n"
        return f" {wanted}." if entry["kind"] == "fact" else f" {wanted}"
    return " " + _fluent(prompt, min(max_tokens, 300), salt)
