"""Arithmetic word problems for the distillation prompts (gumiho.train.sources.prompts):
templates filled from a seeded RNG, so the target writes step-by-step maths."""
from __future__ import annotations

import random

NAMES = ["Alice", "Ben", "Chen", "Dara", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kofi", "Lena",
         "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara"]
ITEMS = [("apple", "apples"), ("notebook", "notebooks"), ("pencil", "pencils"), ("ticket", "tickets"),
         ("cookie", "cookies"), ("book", "books"), ("marble", "marbles"), ("sticker", "stickers")]
SUFFIXES = ["", " Show your work.", " Explain each step.", " Solve it step by step.", " Give the final answer at the end."]


def _math_shopping(r):
    n, p, name = r.randint(2, 12), r.randint(1, 15), r.choice(NAMES)
    one, many = r.choice(ITEMS)
    pay = (n * p // 10 + 1) * 10 + r.choice([0, 10, 20])
    return f"{name} buys {n} {many} that cost ${p} per {one} and pays with ${pay}. How much change does {name} get?"


def _math_speed(r):
    v, t = r.randint(20, 120), r.randint(2, 9)
    kind = r.choice(["car", "train", "bus", "cyclist"])
    if r.random() < 0.5:
        return f"A {kind} travels at {v} km/h for {t} hours. How far does it go?"
    return f"A {kind} covers {v * t} km in {t} hours. What is its average speed?"


def _math_discount(r):
    price, pct = r.randint(4, 60) * 5, r.choice([10, 15, 20, 25, 30, 40, 50])
    item = r.choice(["jacket", "bicycle", "lamp", "pair of shoes", "backpack", "game"])
    return f"A {item} costs ${price}. It is on sale for {pct}% off. What is the sale price?"


def _math_share(r):
    k, each = r.randint(2, 9), r.randint(3, 15)
    extra = r.randint(0, k - 1)
    one, many = r.choice(ITEMS)
    name = r.choice(NAMES)
    return (f"{name} has {k * each + extra} {many} and shares them equally among {k} friends. "
            f"How many does each friend get, and how many are left over?")


def _math_age(r):
    a, d, y = r.randint(5, 20), r.randint(20, 35), r.randint(2, 10)
    n1, n2 = r.sample(NAMES, 2)
    return f"{n1} is {a} years old. {n2} is {d} years older than {n1}. How old will {n2} be in {y} years?"


def _math_area(r):
    w, h = r.randint(2, 30), r.randint(2, 30)
    shape = r.choice(["garden", "room", "field", "table top"])
    q = r.choice(["area", "perimeter", "area and perimeter"])
    return f"A rectangular {shape} is {w} m long and {h} m wide. What is its {q}?"


def _math_multi(r):
    name = r.choice(NAMES)
    one, many = r.choice(ITEMS)
    a, b, c = r.randint(10, 90), r.randint(2, 30), r.randint(2, 30)
    return f"{name} had {a} {many}, gave away {b}, and then bought {c} more. How many {many} does {name} have now?"


def _math_expr(r):
    op = r.choice(["+", "-", "*", "/", "mix"])
    if op == "+":
        return f"What is {r.randint(100, 9999)} + {r.randint(100, 9999)}?"
    if op == "-":
        a = r.randint(500, 9999)
        return f"Calculate {a} - {r.randint(1, a)}."
    if op == "*":
        return f"What is {r.randint(11, 99)} times {r.randint(3, 99)}?"
    if op == "/":
        b = r.randint(2, 25)
        return f"What is {b * r.randint(2, 60)} divided by {b}?"
    return f"Compute ({r.randint(2, 40)} + {r.randint(2, 40)}) * {r.randint(2, 12)} - {r.randint(1, 50)}."


def _math_rate(r):
    n, hours = r.randint(2, 8), r.randint(2, 10)
    per = r.randint(3, 20)
    task = r.choice(["boxes", "pages", "bricks", "cakes", "chairs"])
    return f"One worker packs {per} {task} per hour. How many {task} do {n} workers pack in {hours} hours?"


def _math_fraction(r):
    total = r.randint(2, 12) * 12
    frac = r.choice([("half", 2), ("a third", 3), ("a quarter", 4), ("a sixth", 6)])
    thing = r.choice(["students", "trees", "cars", "pages"])
    return f"There are {total} {thing}. {frac[0].capitalize()} of them are red. How many are not red?"


MATH_GENERATORS = [_math_shopping, _math_speed, _math_discount, _math_share, _math_age, _math_area,
                   _math_multi, _math_expr, _math_rate, _math_fraction]


def math_prompt(rng: random.Random) -> str:
    return rng.choice(MATH_GENERATORS)(rng) + rng.choice(SUFFIXES)
