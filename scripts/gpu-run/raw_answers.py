"""Greedy completions of the shipped prompts from a running server, once per concurrency given.

    python raw_answers.py URL API_KEY PROMPTS_JSON OUT_PREFIX CONCURRENCY...

Writes OUT_PREFIX-<i>-c<N>.json (prompt id -> text, finish reason, token count) for each run
and prints, for each run after the first, how many answers differ from the first run's and at
which word they part. This is the raw material for the answer check's drift tolerance on a real
batching engine (GPU run only; standard library only).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def complete(url: str, key: str, model: str, item: dict) -> dict:
    body = json.dumps({"model": model, "prompt": item["prompt"], "temperature": 0,
                       "max_tokens": int(item.get("max_tokens", 64))}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 (loopback)
        answer = json.load(response)
    choice = answer["choices"][0]
    return {"text": choice["text"], "finish_reason": choice.get("finish_reason"),
            "completion_tokens": answer.get("usage", {}).get("completion_tokens")}


def parting_word(a: str, b: str) -> int:
    wa, wb = a.split(), b.split()
    return next((i for i, (x, y) in enumerate(zip(wa, wb)) if x != y), min(len(wa), len(wb)))


def main() -> None:
    url, key, prompts_file, prefix = sys.argv[1:5]
    levels = [int(n) for n in sys.argv[5:]]
    prompts = json.loads(Path(prompts_file).read_text())["prompts"]
    request = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (loopback)
        model = json.load(response)["data"][0]["id"]
    runs = []
    for index, level in enumerate(levels):
        started = time.time()
        with ThreadPoolExecutor(max_workers=level) as pool:
            answers = list(pool.map(lambda item: complete(url, key, model, item), prompts))
        run = {"concurrency": level, "model": model, "seconds": round(time.time() - started, 2),
               "answers": {item["id"]: answer for item, answer in zip(prompts, answers)}}
        Path(f"{prefix}-{index}-c{level}.json").write_text(json.dumps(run, indent=1) + "\n")
        runs.append(run)
        line = f"run {index} c={level}: {len(prompts)} prompts in {run['seconds']} s"
        if index:
            first = runs[0]["answers"]
            differ = {pid: parting_word(first[pid]["text"], a["text"])
                      for pid, a in run["answers"].items() if a["text"] != first[pid]["text"]}
            words = sorted(differ.values())
            line += f"; {len(differ)} differ from run 0 (c={levels[0]})"
            if words:
                line += f", parting at word {words[0]}..{words[-1]} (median {words[len(words) // 2]})"
        print(line, flush=True)


if __name__ == "__main__":
    main()
