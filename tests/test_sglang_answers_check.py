"""The answer check's judgement (roles/sglang_answers/module_utils/sglang_answers_check.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from ansible.module_utils.sglang_answers_check import (
    agrees,
    check_prompts,
    check_reference,
    degenerate_class,
    detection_probability,
    expected_missing,
    judge,
    samples_needed,
)

REPO = Path(__file__).resolve().parent.parent
PROMPTS = json.loads((REPO / "roles/sglang_answers/files/prompts.json").read_text(encoding="utf-8"))
PROSE = ("The printing press changed how people shared ideas across Europe. Before it, books were "
         "copied by hand, slowly and at great cost, so few people owned any. Gutenberg's movable type "
         "made many copies of one text cheap, and within fifty years presses stood in most large cities.")


def test_the_sample_size_sees_five_percent_corruption_with_99_percent_confidence():
    assert samples_needed(0.05, 0.99) == 90
    assert detection_probability(0.05, 89) < 0.99 <= detection_probability(0.05, 90)
    prompts = check_prompts(PROMPTS)
    assert len(prompts) >= 90
    assert detection_probability(0.05, len(prompts)) >= 0.99
    kinds = {p["kind"] for p in prompts}
    assert kinds == {"arithmetic", "fact", "code", "long"}
    assert all(p["max_tokens"] >= 256 for p in prompts if p["kind"] == "long")


def test_every_corrupt_generation_is_caught_so_the_sample_sees_five_percent_at_99_percent():
    """In each trial the check flags exactly the corrupt answers: a trial with any is caught.

    So the chance to catch a 5% corruption is the chance that 96 draws hold at least one:
    1 - 0.95 ** 96 = 99.3%. The trials (fixed seed) check the judgement, the formula the rate.
    """
    prompts = check_prompts(PROMPTS)
    rng = random.Random(4841)
    trials_with_corruption = caught = 0
    for _ in range(300):
        corrupt = {p["id"] for p in prompts if rng.random() < 0.05}
        answers = {p["id"]: {"text": "!" * 40 if p["id"] in corrupt else PROSE + " " + " ".join(p.get("expect", []))}
                   for p in prompts}
        verdict = judge(prompts, answers, None, 12, 0.2)
        assert set(verdict.per_prompt) == corrupt
        trials_with_corruption += bool(corrupt)
        caught += not verdict.passed
    assert caught == trials_with_corruption >= 0.98 * 300


@pytest.mark.parametrize(("text", "kind"), [
    ("", "empty"),
    ("   \n ", "empty"),
    ("The answer is \ufffd\ufffd", "replacement_char"),
    ("Sure! " + "!" * 30, "degenerate_run"),
    ("and and and and and and and then", "degenerate_run"),
    ("It rains. " + "the river runs to the sea " * 5, "loop"),
    (PROSE, None),
    ("def f(x):\n    # ----------------------------\n    return x", None),
    ("Result\n============\nfine", None),
    ("Numbers 1, 2, 3, 4, 5, 6, 7 are small.", None),
])
def test_degenerate_classes(text, kind):
    assert degenerate_class(text) == kind


def test_expected_answers_match_whole_numbers_and_words_only():
    assert not expected_missing(" 42", ["42"])
    assert not expected_missing("It is 42.", ["42"])
    assert expected_missing(" 420", ["42"])
    assert expected_missing(" 4.2", ["42"])
    assert not expected_missing("The capital is paris.", ["Paris"])
    assert expected_missing("The capital is Lyon.", ["Paris"])
    assert expected_missing("because it shines", ["Au"])
    assert not expected_missing("Its symbol is Au.", ["Au"])
    assert not expected_missing("anything", [])


def test_tail_drift_agrees_and_early_drift_does_not():
    tail = PROSE.replace("presses stood in most large cities", "printers worked in every town")
    assert agrees(tail, PROSE, 12)
    early = "The printing press changed everything about how ideas moved in Europe."
    assert not agrees(early, PROSE, 12)
    assert agrees("42", "42", 12)
    assert not agrees("41", "42", 12)


def _healthy(prompts, rng, early_share):
    """A healthy server's answers against the reference: tails differ, a few leave early."""
    reference, answers = {}, {}
    for p in prompts:
        words = (" ".join(p.get("expect", [])) + " " + PROSE + " " + p["id"]).split() * 3
        reference[p["id"]] = " ".join(words)
        cut = 5 if rng.random() < early_share else 40
        answers[p["id"]] = {"text": " ".join(words[:cut] + ["Instead", "it", "went", "elsewhere", "calmly."])}
    return reference, answers


def test_a_healthy_server_with_tail_drift_and_a_few_near_ties_passes():
    prompts = check_prompts(PROMPTS)
    reference, answers = _healthy(prompts, random.Random(1), early_share=0.08)
    verdict = judge(prompts, answers, reference, 12, 0.2)
    assert verdict.passed, verdict.msg
    assert verdict.compared == len(prompts)
    assert 0 < verdict.drift_fraction <= 0.2


def test_fluent_but_different_answers_fail_as_drift_naming_the_prompts():
    prompts = [p for p in check_prompts(PROMPTS) if p["kind"] == "long"]
    reference, _ = _healthy(prompts, random.Random(1), early_share=0)
    answers = {p["id"]: {"text": "A completely different but fluent essay begins here, calm and clear."}
               for p in prompts}
    verdict = judge(prompts, answers, reference, 12, 0.2)
    assert not verdict.passed
    assert verdict.classes["drift"] == len(prompts)
    assert "drift 72" in verdict.msg and "at most 20% may" in verdict.msg
    assert len(verdict.examples) == 3 and all(e["class"] == "drift" for e in verdict.examples)


def test_a_failure_names_the_classes_their_counts_and_three_prompts():
    prompts = check_prompts(PROMPTS)
    answers = {p["id"]: {"text": PROSE + " " + " ".join(p.get("expect", []))} for p in prompts}
    answers["long-1"] = {"text": "!" * 50}
    answers["long-2"] = {"text": "!" * 50}
    answers["fact-1"] = {"text": " Lyon."}
    answers["long-3"] = {"text": ""}
    answers["long-4"] = {"error": "HTTP 500"}
    verdict = judge(prompts, answers, None, 12, 0.2)
    assert not verdict.passed
    assert verdict.classes == {"error": 1, "empty": 1, "replacement_char": 0, "degenerate_run": 2,
                               "loop": 0, "wrong": 1, "drift": 0}
    assert "5 of 96 answers failed: error 1, empty 1, degenerate_run 2, wrong 1." in verdict.msg
    assert len(verdict.examples) == 3


@pytest.mark.parametrize(("data", "message"), [
    ({}, "non-empty list under 'prompts'"),
    ({"prompts": [{"id": "a", "kind": "poem", "prompt": "x", "max_tokens": 4}]}, "'kind' must be one of"),
    ({"prompts": [{"id": "a", "kind": "fact", "prompt": "x", "max_tokens": 0}]}, "'max_tokens' must be a positive"),
    ({"prompts": [{"id": "a", "kind": "fact", "prompt": "x", "max_tokens": 4},
                  {"id": "a", "kind": "fact", "prompt": "y", "max_tokens": 4}]}, "unique non-empty string"),
])
def test_a_bad_prompt_set_is_refused_naming_the_fault(data, message):
    with pytest.raises(ValueError, match=message):
        check_prompts(data)


def test_a_reference_from_another_prompt_set_is_refused():
    prompts = check_prompts(PROMPTS)
    with pytest.raises(ValueError, match="shares no prompt id"):
        check_reference({"answers": {"other": "x"}}, prompts)
    with pytest.raises(ValueError, match="sglang_answers_record=FILE"):
        check_reference({"nothing": 1}, prompts)
