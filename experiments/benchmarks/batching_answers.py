"""What batching changes in an answer: the same GSM8K val CoT items on the local server with one slot, with the
default slots, and with the default slots again, and the answers that changed between each pair.

Each run is a ``compare`` of CoT on the first ``--items`` GSM8K val items, at temperature 0 with DSPy's cache off,
into a results directory of its own (``--work``: a killed run resumes from the records it kept), on a server of its
own started fresh for it (``slots = 1`` runs one item at a time; the default runs ``num_threads`` = its slots, so its
items share batches). The server's prompt cache is on, as by default. Per pair of runs it prints the items whose final
answer changed and those whose text (reasoning and answer) changed, and each run's accuracy and serving identity.
Its counts do not depend on the machine's load; its wall times are not printed.

    python experiments/benchmarks/batching_answers.py --data-dir DATA_DIR --work batching-answers
    python experiments/benchmarks/batching_answers.py --data-dir DATA_DIR --work /tmp/ba --items 2 \\
        --model qwen2.5-coder-0.5b                                          # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import dspy_for._offline  # noqa: F401  (litellm's offline defaults, before any LM client is imported)

#: run name -> LM options (the default: none)
RUNS: dict[str, dict[str, Any]] = {"1 slot": {"slots": 1}, "default": {}, "default again": {}}
PAIRS = (("1 slot", "default"), ("default", "default again"), ("1 slot", "default again"))


def run(name: str, options: dict[str, Any], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One run's records by item key (a fresh server of its own, stopped after)."""
    from dspy_for.experiments.comparison import compare
    from dspy_for.lm import server

    folder = work / name.replace(" ", "_")
    result = compare(
        dataset="gsm8k",
        split="val",
        first=args.items,
        data_dir=args.data_dir,
        methods="cot",
        lm=f"local/{args.model}",
        lm_options=options,
        max_tokens=args.max_tokens,
        cache=False,
        results_dir=str(folder / "items"),
        tracking_uri=f"sqlite:///{folder}/mlflow.db",
        experiment=f"batching-{name.replace(' ', '-')}",
    )
    server.stop_server(args.model)  # the next run starts its own
    if not result.ok:
        raise SystemExit(f"the {name} run has failed items: run again to finish them ({folder})")
    return {item.key: item for item in result.results["gsm8k"]["cot"].items}


def text(item: Any) -> str:
    return json.dumps(item.prediction, sort_keys=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="directory with gsm8k/train.jsonl (e.g. ../shared/datasets)")
    ap.add_argument("--work", required=True, help="where each run keeps its records (a re-run resumes from them)")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--items", type=int, default=50, help="GSM8K val items, from the first")
    ap.add_argument("--max-tokens", type=int, default=1024)
    args = ap.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ["DSPY_FOR_SERVER_DIR"] = str(work / "servers")  # servers of our own: never a shared one
    os.environ["DSPY_FOR_CACHE_DIR"] = str(work / "dspy_cache")  # and cache=False: every answer is the server's

    records = {name: run(name, options, args, work) for name, options in RUNS.items()}
    print(f"\n{args.model}, CoT, GSM8K val first {args.items} items, temperature 0, DSPy's cache off")
    for name, recs in records.items():
        scored = [r for r in recs.values() if r.error is None]
        served = sorted({s for r in recs.values() for s in r.served_by})
        accuracy = sum(r.score for r in scored) / max(len(scored), 1)
        print(f"  {name:14s} {accuracy:6.1%} of {len(scored)} scored; served by {'; '.join(served)}")
    print(f"\n{'pair':32s} {'items':>5s} {'final answers changed':>22s} {'texts changed':>14s}")
    for a, b in PAIRS:
        keys = sorted(records[a].keys() & records[b].keys())
        answers = [k for k in keys if records[a][k].answer != records[b][k].answer]
        texts = [k for k in keys if text(records[a][k]) != text(records[b][k])]
        print(f"{a + ' vs ' + b:32s} {len(keys):5d} {len(answers):22d} {len(texts):14d}")
        for k in answers:
            ra, rb = records[a][k], records[b][k]
            right = f"{'right' if ra.score else 'wrong'} → {'right' if rb.score else 'wrong'}"
            print(f"    {ra.id}: {ra.answer} → {rb.answer} ({right})")


if __name__ == "__main__":
    main()
