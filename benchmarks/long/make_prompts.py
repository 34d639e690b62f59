"""Long retrieval-style prompts for the lossless check on long contexts.

Each prompt joins several CNN/DailyMail articles of benchmarks/prompts/sum.jsonl
(Apache-2.0, see benchmarks/prompts/README.md) as numbered documents and asks about
one of them, as a retrieval-augmented request does: 2,400 to 5,000 tokens of context.
Written to retrieval.jsonl beside this script, deterministic:

    python benchmarks/long/make_prompts.py
"""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "prompts" / "sum.jsonl"
QUESTIONS = ["Using only the documents above, summarise document {j} in two sentences.",
             "Which people are named in document {j}, and what does it say each of them did?",
             "What is the main claim of document {j}, and which document above is most closely related to it?",
             "List three facts from document {j}, each with the sentence it comes from.",
             "In one paragraph, compare document 1 with document {j}."]
# (articles per prompt, document asked about): about 2,400 to 5,000 tokens each.
SHAPES = [(3, 2), (4, 3), (5, 1), (3, 3), (6, 5)]


def article(turn: str) -> str:
    """The article text of a summarisation prompt (its "Summarize:" instruction dropped)."""
    text = turn.strip()
    for word in ("Summarize:", "Summarise:"):
        text = text.removeprefix(word)
    return text.strip()


def main() -> None:
    arts = [article(json.loads(line)["turns"][0]) for line in SOURCE.open(encoding="utf-8")]
    arts = [a for a in arts if len(a) > 3000]
    out, start = [], 0
    for i, (n, j) in enumerate(SHAPES):
        docs = arts[start:start + n]
        start += n
        body = "\n\n".join(f"Document {k + 1}:\n{d}" for k, d in enumerate(docs))
        out.append({"question_id": i + 1, "category": "retrieval",
                    "turns": [body + "\n\n" + QUESTIONS[i % len(QUESTIONS)].format(j=j)]})
    path = HERE / "retrieval.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in out), encoding="utf-8")
    print(f"wrote {len(out)} prompts to {path.name}")


if __name__ == "__main__":
    main()
