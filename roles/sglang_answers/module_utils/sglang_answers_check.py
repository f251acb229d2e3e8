"""What makes an answer wrong: degenerate text, a missing expected answer, drift from a reference.

Plain functions, no I/O: the module (library/sglang_answers.py) asks the server and hands each
answer here; tests/test_sglang_answers_check.py calls them directly.

The classes, in the order an answer is judged (the first that fits is its class):
  error             the request failed (no answer to judge)
  empty             nothing but white space
  replacement_char  U+FFFD: bytes that were not text (a corrupt token id)
  degenerate_run    one character 12 or more times in a row (``!!!!!!!!!!!!``; not the rule
                    characters - = _ * # ~), or one word 6 or more times
  loop              a phrase of 2 to 16 words said 4 or more times back to back
  wrong             the prompt names its answer (``expect``) and none of them is there
  drift             a reference was given and this answer leaves it within its first words

Drift, and why a healthy server passes: greedy decoding is not bit-for-bit stable across batch
sizes, so a healthy server's answer can leave the reference's words at a near-tie and go on,
fluent, somewhere else: mostly late, rarely early. A tuned tactic that computes wrong changes the
answers from their first words on, nearly all of them. So an answer drifts when it does not agree
with the reference's first ``prefix_words`` words (or all of the shorter answer's words), and
drift fails the check only when more than ``max_drift`` of the compared answers drift: a few early
near-ties pass, a different model, quantisation or a wrong kernel does not. Degenerate and wrong
answers fail the check on their first occurrence.

The sample: corrupt generations at a rate p are missed by n independent generations with
probability (1 - p) ** n. For p = 5% and 99% confidence, n >= ln(0.01) / ln(0.95) = 89.8, so 90;
the shipped set has 96 distinct prompts, 72 of them long generations (where corruption shows).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

CLASSES = ("error", "empty", "replacement_char", "degenerate_run", "loop", "wrong", "drift")
DEGENERATE = ("error", "empty", "replacement_char", "degenerate_run", "loop")
CHAR_RUN = 12
WORD_RUN = 6
PHRASE_REPEATS = 4
PHRASE_MAX_WORDS = 16
PROMPT_KINDS = ("arithmetic", "fact", "code", "long")
SEPARATORS = "-=_*#~"
_CHAR_RUN_RE = re.compile(r"(\S)\1{%d,}" % (CHAR_RUN - 1))


def samples_needed(rate: float, confidence: float) -> int:
    """The fewest independent generations that see a corrupt one with this confidence."""
    if not 0 < rate < 1 or not 0 < confidence < 1:
        raise ValueError(f"rate and confidence must lie strictly between 0 and 1, got {rate} and {confidence}")
    return math.ceil(math.log(1 - confidence) / math.log(1 - rate))


def detection_probability(rate: float, samples: int) -> float:
    return 1 - (1 - rate) ** samples


def _char_run(text: str) -> bool:
    """A run of one non-space character, other than the rule and separator characters of text and code."""
    return any(match.group(1) not in SEPARATORS for match in _CHAR_RUN_RE.finditer(text))


def _repeats(words: list[str], start: int, size: int) -> int:
    """How many times words[start:start+size] stands back to back from start."""
    phrase = words[start:start + size]
    count = 1
    at = start + size
    while words[at:at + size] == phrase:
        count += 1
        at += size
    return count


def _word_loop(words: list[str]) -> str | None:
    """degenerate_run for one word said WORD_RUN times, loop for a phrase said PHRASE_REPEATS times."""
    for start in range(len(words)):
        if _repeats(words, start, 1) >= WORD_RUN:
            return "degenerate_run"
    for size in range(2, PHRASE_MAX_WORDS + 1):
        for start in range(0, max(0, len(words) - size * PHRASE_REPEATS + 1)):
            if _repeats(words, start, size) >= PHRASE_REPEATS:
                return "loop"
    return None


def degenerate_class(text: str) -> str | None:
    """The degenerate class of one answer, or None when its text is sound."""
    if not text.strip():
        return "empty"
    if "\ufffd" in text:
        return "replacement_char"
    if _char_run(text):
        return "degenerate_run"
    return _word_loop(text.lower().split())


def expected_missing(text: str, expect: list[str]) -> bool:
    """True when the prompt names its answers and the text holds none (each as a whole word or number)."""
    if not expect:
        return False
    folded = text.casefold()
    for wanted in expect:
        pattern = (r"(?<![\d.,])%s(?![\d]|[.,]\d)" if wanted.isdigit() else r"(?<!\w)%s(?!\w)")
        if re.search(pattern % re.escape(wanted.casefold()), folded):
            return False
    return True


def agrees(answer: str, reference: str, prefix_words: int) -> bool:
    """The answer keeps the reference's first words (all of the shorter one's, at most prefix_words)."""
    got, want = answer.split(), reference.split()
    size = min(prefix_words, len(got), len(want))
    if size == 0:
        return not got and not want
    return got[:size] == want[:size]


@dataclass
class Verdict:
    passed: bool
    samples: int
    classes: dict[str, int]
    examples: list[dict[str, str]]
    drift_fraction: float | None
    compared: int
    msg: str
    per_prompt: dict[str, str] = field(default_factory=dict)


def _excerpt(text: str, size: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= size else flat[:size - 3] + "..."


def judge(prompts: list[dict], answers: dict[str, dict], reference: dict[str, str] | None,
          prefix_words: int, max_drift: float) -> Verdict:
    """Judge every prompt's answer. answers maps a prompt id to {"text": ...} or {"error": ...}."""
    per_prompt: dict[str, str] = {}
    examples: list[dict[str, str]] = []
    compared = drifted = 0
    for prompt in prompts:
        pid = prompt["id"]
        got = answers.get(pid, {"error": "no answer"})
        if "error" in got:
            kind, shown = "error", got["error"]
        else:
            text = got["text"]
            kind = degenerate_class(text) or ("wrong" if expected_missing(text, prompt.get("expect") or []) else "")
            shown = text
            if not kind and reference is not None and pid in reference:
                compared += 1
                if not agrees(text, reference[pid], prefix_words):
                    drifted += 1
                    kind = "drift"
        if kind:
            per_prompt[pid] = kind
    counts = Counter(per_prompt.values())
    classes = {name: counts.get(name, 0) for name in CLASSES}
    drift_fraction = drifted / compared if compared else None
    failing = {name for name in CLASSES if name != "drift" and classes[name]}
    if drift_fraction is not None and drift_fraction > max_drift:
        failing.add("drift")
    for pid, kind in per_prompt.items():
        if kind in failing and len(examples) < 3:
            got = answers.get(pid, {})
            examples.append({"prompt": pid, "class": kind,
                             "excerpt": _excerpt(got.get("text", got.get("error", "")))})
    passed = not failing
    samples = len(prompts)
    if passed:
        drift_note = (f", {drifted} of {compared} drifted from the reference (at most {max_drift:.0%} may)"
                      if compared else ", no reference to compare with")
        msg = f"All {samples} answers are sound{drift_note}."
    else:
        seen = ", ".join(f"{name} {classes[name]}" for name in CLASSES if name in failing)
        where = "; ".join(f"{e['prompt']} ({e['class']}): {e['excerpt']!r}" for e in examples)
        drift_note = (f" Drift: {drifted} of {compared} answers left the reference within their first "
                      f"{prefix_words} words; at most {max_drift:.0%} may." if "drift" in failing else "")
        msg = f"{len([p for p, k in per_prompt.items() if k in failing])} of {samples} answers failed: {seen}.{drift_note} E.g. {where}"
    return Verdict(passed, samples, classes, examples, drift_fraction, compared, msg, per_prompt)


def check_prompts(data: object) -> list[dict]:
    """The prompt set, checked: ids unique, kinds known, token budgets positive."""
    if not isinstance(data, dict) or not isinstance(data.get("prompts"), list) or not data["prompts"]:
        raise ValueError("the prompt set must be a mapping with a non-empty list under 'prompts'")
    seen: set[str] = set()
    for index, prompt in enumerate(data["prompts"]):
        where = f"prompt {index + 1}"
        if not isinstance(prompt, dict):
            raise ValueError(f"{where} is a {type(prompt).__name__}, expected a mapping")
        pid = prompt.get("id")
        if not isinstance(pid, str) or not pid or pid in seen:
            raise ValueError(f"{where}: 'id' must be a unique non-empty string, got {pid!r}")
        seen.add(pid)
        if prompt.get("kind") not in PROMPT_KINDS:
            raise ValueError(f"{pid}: 'kind' must be one of {', '.join(PROMPT_KINDS)}, got {prompt.get('kind')!r}")
        if not isinstance(prompt.get("prompt"), str) or not prompt["prompt"].strip():
            raise ValueError(f"{pid}: 'prompt' must be non-empty text")
        tokens = prompt.get("max_tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ValueError(f"{pid}: 'max_tokens' must be a positive whole number, got {tokens!r}")
        expect = prompt.get("expect", [])
        if not isinstance(expect, list) or not all(isinstance(e, str) and e for e in expect):
            raise ValueError(f"{pid}: 'expect' must be a list of non-empty strings")
    return data["prompts"]


def check_reference(data: object, prompts: list[dict]) -> dict[str, str]:
    """The answers of a recorded reference, checked against the prompt set it was made with."""
    if not isinstance(data, dict) or not isinstance(data.get("answers"), dict):
        raise ValueError("a reference must be a mapping with the recorded answers under 'answers' "
                         "(written by playbooks/answers.yml -e sglang_answers_record=FILE)")
    answers = data["answers"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in answers.items()):
        raise ValueError("a reference's answers must map prompt ids to text")
    known = {p["id"] for p in prompts}
    common = known & set(answers)
    if not common:
        raise ValueError("the reference shares no prompt id with the prompt set: it was recorded with "
                         "another set; record it again")
    return answers
