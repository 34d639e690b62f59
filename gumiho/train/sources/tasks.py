"""A broad bank of assistant tasks for self-distillation prompts (source ``tasks``).

The first prompt sets were mostly questions about Wikipedia paragraphs, templated
arithmetic and small coding tasks. A drafter trained on the answers to those agrees
with the target far less often on open-ended requests (writing, role-play, puzzles,
structured extraction, essays) than on its own held-out data, because the answers to
such requests are written in other styles. This bank covers those kinds of request.
Each template is filled with subjects drawn from the Wikipedia titles and from the
small lists below, and may get a format instruction, so a few hundred templates
make many thousands of distinct prompts.

Every template here was written for this project; none is taken from a benchmark.
"""
from __future__ import annotations

import random


def trim_text(text: str, limit: int) -> str:
    """``text`` on one line, cut to at most ``limit`` characters at a sentence's end
    where one is near enough, else at a word, marked "..." (the prompt banks' extracts)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(". ", 0, limit)
    return text[: cut + 1] if cut > limit // 3 else text[:limit].rsplit(" ", 1)[0] + "..."

# --------------------------------------------------------------------------- slot values

PERSONAS = ["a pirate captain", "a detective in 1920s London", "a medieval knight", "a museum tour guide",
            "a head chef", "an astronaut on the space station", "a history teacher", "a family doctor",
            "a personal trainer", "a travel agent", "a customer support agent", "a wise old wizard",
            "a friendly robot", "a sports commentator", "a park ranger", "a marine biologist",
            "a startup founder", "a librarian", "a lighthouse keeper", "a famous poet", "a gardener",
            "a news anchor", "a car mechanic", "a kindergarten teacher", "a ship's navigator",
            "a time traveller from the year 2300", "a dragon who guards a library", "a barista",
            "a mountain guide", "an art critic"]
AUDIENCES = ["a child", "a teenager", "a busy manager", "a new employee", "my grandmother", "a classroom of students",
             "a tourist", "a beginner", "an expert", "a friend who is worried"]
PLACES = ["Kyoto", "Lisbon", "the Scottish Highlands", "Cape Town", "Iceland", "Buenos Aires", "a small fishing "
          "village", "Marrakech", "Vancouver", "the Amazon rainforest", "Prague", "a busy night market",
          "the Sahara", "Hanoi", "a mountain cabin", "Istanbul", "New Zealand", "Venice", "Nairobi", "Helsinki"]
PRODUCTS = ["a solar-powered backpack", "a smart water bottle", "noise-cancelling headphones", "a folding bicycle",
            "an electric kettle", "a language-learning app", "a reusable notebook", "a plant-watering sensor",
            "a budget-tracking app", "a portable projector", "ergonomic office chair", "a recipe subscription box"]
EVENTS = ["a birthday party", "a team-building day", "a school science fair", "a charity run", "a book club meeting",
          "a family reunion", "a neighbourhood clean-up", "a small wedding", "a product launch",
          "a coding workshop", "a holiday dinner", "a camping trip"]
GOALS = ["learn to cook healthy meals", "improve my public speaking", "get better at chess",
         "make new friends in a new city", "read more books", "build a habit of exercising",
         "reduce my stress at work", "learn to draw", "manage my time better", "start a small business",
         "become a better listener", "keep my home tidy", "prepare for a marathon", "learn a musical instrument"]
DECISIONS = ["choosing a university", "buying a used car", "adopting a pet", "moving to another city",
             "changing careers", "picking a laptop", "renting my first apartment", "starting a vegetable garden",
             "choosing a programming language to learn", "planning a long trip abroad"]
STEM_CONCEPTS = ["photosynthesis", "natural selection", "plate tectonics", "the greenhouse effect", "entropy",
                 "Newton's third law", "how vaccines train the immune system", "how a transistor works",
                 "how GPS finds your position", "the Doppler effect", "how batteries store energy",
                 "why the sky is blue", "how neural networks learn", "the structure of an atom",
                 "how antibiotics work", "what causes tides", "the speed of light", "how a refrigerator cools",
                 "chemical bonds", "the life cycle of a star", "how the heart pumps blood", "radioactive decay",
                 "how airplanes stay in the air", "binary numbers", "what an algorithm is", "how the ear hears"]
STEM_PAIRS = [("mitosis", "meiosis"), ("speed", "velocity"), ("weather", "climate"), ("a virus", "a bacterium"),
              ("AC", "DC current"), ("mass", "weight"), ("an element", "a compound"), ("RAM", "storage"),
              ("nuclear fission", "nuclear fusion"), ("heat", "temperature"), ("a comet", "an asteroid"),
              ("acids", "bases"), ("DNA", "RNA"), ("a series circuit", "a parallel circuit"),
              ("renewable", "non-renewable energy"), ("a compiler", "an interpreter")]
HUMANITIES = ["the printing press", "the Industrial Revolution", "the fall of the Roman Empire", "the Renaissance",
              "the invention of writing", "the Silk Road", "the French Revolution", "the spread of railways",
              "the discovery of penicillin", "the rise of social media", "the abolition of slavery",
              "the Cold War", "the invention of the telephone", "the Olympic Games", "ancient Greek democracy",
              "the age of exploration", "the moon landing", "the invention of money", "universal suffrage",
              "the agricultural revolution"]
IDEAS = ["free will", "utilitarianism", "the social contract", "supply and demand", "opportunity cost",
         "inflation", "globalisation", "the tragedy of the commons", "minimalism", "stoicism",
         "the placebo effect", "confirmation bias", "the scientific method", "freedom of speech",
         "universal basic income", "the value of art"]
DEBATES = ["schools should start later in the morning", "homework should be banned", "cities should be car-free",
           "everyone should learn to code", "museums should be free", "remote work is better than office work",
           "social media does more harm than good", "space exploration is worth the cost",
           "zoos should exist", "uniforms should be required at school", "a four-day work week is a good idea",
           "voting should be compulsory"]
FEELINGS = ["nervous about an exam", "excited about a new job", "sad that a friend moved away",
            "frustrated with a slow project", "proud of finishing a marathon", "unsure about a big decision"]
GENRES = ["mystery", "science fiction", "fairy tale", "comedy", "adventure", "ghost story", "fable"]
ANIMALS = ["owl", "octopus", "fox", "elephant", "penguin", "tortoise", "hummingbird", "wolf", "cat", "dolphin"]
FORMATS = ["", "", "", " Keep it under 100 words.", " Use bullet points.", " Answer as a numbered list.",
           " Use a friendly tone.", " Be concise.", " Give an example.", " Use two short paragraphs.",
           " Use a formal tone.", " End with a one-sentence summary."]


def _title(r: random.Random, titles: list[str]) -> str:
    return r.choice(titles) if titles else r.choice(HUMANITIES)


# --------------------------------------------------------------------------- families
# Each entry takes (rng, titles) and returns one prompt; titles are Wikipedia titles.

WRITING = [
    lambda r, t: f"Write a short blog post about visiting {r.choice(PLACES)}.",
    lambda r, t: f"Write a persuasive paragraph arguing that {r.choice(DEBATES)}.",
    lambda r, t: f"Write a product description for {r.choice(PRODUCTS)}.",
    lambda r, t: f"Draft a short speech for {r.choice(EVENTS)}.",
    lambda r, t: f"Write a letter to a friend describing {r.choice(EVENTS)}.",
    lambda r, t: f"Write a review of an imaginary restaurant in {r.choice(PLACES)}.",
    lambda r, t: f"Write a {r.choice(GENRES)} story opening about {r.choice(['a', 'an'])} {r.choice(ANIMALS)}.",
    lambda r, t: f"Write a limerick about {_title(r, t)}.",
    lambda r, t: f"Write a poem about {r.choice(PLACES)} at dawn.",
    lambda r, t: f"Write a dialogue between {r.choice(PERSONAS)} and {r.choice(PERSONAS)}.",
    lambda r, t: f"Write a social media post announcing {r.choice(EVENTS)}.",
    lambda r, t: f"Write a cover letter for a job as {r.choice(PERSONAS)}.",
    lambda r, t: f"Write a short news report about {r.choice(EVENTS)} in {r.choice(PLACES)}.",
    lambda r, t: f"Write a thank-you note to {r.choice(AUDIENCES)} who helped me {r.choice(GOALS)}.",
    lambda r, t: f"Write an engaging introduction for an article about {_title(r, t)}.",
    lambda r, t: f"Write a short essay on {r.choice(IDEAS)}.",
    lambda r, t: f"Write a travel itinerary for three days in {r.choice(PLACES)}.",
    lambda r, t: f"Write an advertisement for {r.choice(PRODUCTS)} aimed at {r.choice(AUDIENCES)}.",
    lambda r, t: f"Write a song chorus about {r.choice(FEELINGS).split(' about ')[-1]}.",
    lambda r, t: f"Write a diary entry from someone who is {r.choice(FEELINGS)}.",
    lambda r, t: f"Write a short fable with a moral, starring a {r.choice(ANIMALS)}.",
    lambda r, t: f"Write an email to my manager asking for time off for {r.choice(EVENTS)}.",
]

ROLEPLAY = [
    lambda r, t: f"Pretend you are {r.choice(PERSONAS)}. Describe your typical day.",
    lambda r, t: f"You are {r.choice(PERSONAS)}. A visitor asks you about {_title(r, t)}. What do you say?",
    lambda r, t: f"Act as {r.choice(PERSONAS)} and give me advice on how to {r.choice(GOALS)}.",
    lambda r, t: f"Imagine you are {r.choice(PERSONAS)}. Introduce yourself to {r.choice(AUDIENCES)}.",
    lambda r, t: f"Role-play as {r.choice(PERSONAS)} welcoming guests to {r.choice(PLACES)}.",
    lambda r, t: f"Stay in character as {r.choice(PERSONAS)}: what is the hardest part of your work?",
    lambda r, t: f"You are {r.choice(PERSONAS)}. Explain {r.choice(STEM_CONCEPTS)} in your own style.",
    lambda r, t: f"Pretend to be a {r.choice(ANIMALS)} and describe the world from your point of view.",
    lambda r, t: f"Imagine you are {_title(r, t)}. Tell me your story in the first person.",
    lambda r, t: f"As {r.choice(PERSONAS)}, respond to a customer who is {r.choice(FEELINGS)}.",
]


def _order_puzzle(r, t):
    names = r.sample(["Ana", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal"], 4)
    rel = r.choice([("taller", "shortest"), ("older", "youngest"), ("faster", "slowest")])
    facts = [f"{names[i]} is {rel[0]} than {names[i + 1]}" for i in range(3)]
    r.shuffle(facts)
    return f"{'. '.join(facts)}. Who is the {rel[1]}? Explain your reasoning."


def _weekday_puzzle(r, t):
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    return f"If today is {r.choice(days)}, what day of the week will it be in {r.randint(3, 100)} days? Explain."


def _sequence_puzzle(r, t):
    a, d = r.randint(1, 9), r.randint(2, 5)
    kind = r.choice(["add", "mul", "square"])
    if kind == "add":
        seq = [a + d * i for i in range(5)]
    elif kind == "mul":
        seq = [a * d ** i for i in range(5)]
    else:
        seq = [(a + i) ** 2 for i in range(5)]
    return f"What number comes next in the sequence {', '.join(map(str, seq))}? Explain the pattern."


def _family_puzzle(r, t):
    n = r.choice(["Maria", "Tom", "Aisha", "Ivan"])
    q = r.choice([f"{n}'s mother's brother's son is {n}'s what?", f"{n}'s father's only sister's daughter is {n}'s what?",
                  f"{n} has two brothers, and each brother has one sister. How many children are in the family?"])
    return q + " Explain step by step."


def _syllogism(r, t):
    a, b, c = r.sample(["cats", "mammals", "pets", "animals", "birds", "things that fly", "robots", "machines"], 3)
    return (f"All {a} are {b}. Some {b} are {c}. Does it follow that some {a} are {c}? "
            f"Explain your reasoning.")


REASONING = [
    _order_puzzle, _weekday_puzzle, _sequence_puzzle, _family_puzzle, _syllogism,
    lambda r, t: (f"A farmer has {r.randint(10, 40)} sheep and all but {r.randint(2, 9)} run away. "
                  f"How many are left? Think carefully."),
    lambda r, t: f"Is this argument valid? '{r.choice(DEBATES).capitalize()}, because everyone I know agrees.' Explain.",
    lambda r, t: "I have a 3-litre jug and a 5-litre jug. How can I measure exactly 4 litres? Explain each step.",
    lambda r, t: (f"If {r.randint(3, 8)} machines make {r.randint(3, 8)} widgets in {r.randint(3, 8)} minutes, "
                  f"how long do {r.randint(20, 100)} machines take to make the same number of widgets each? Explain."),
    lambda r, t: f"What are the hidden assumptions in the claim that {r.choice(DEBATES)}?",
    lambda r, t: f"Give a step-by-step plan to find a bug in a program that crashes only on {r.choice(['Mondays', 'large inputs', 'empty files', 'slow networks'])}.",
    lambda r, t: "A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the ball. How much does the ball cost? Explain.",
]

EXTRACTION = [
    "Extract every person, place and date mentioned in this text and return them as JSON.\n\n{extract}",
    "Return the key facts from this text as 'key: value' lines.\n\n{extract}",
    "Make a table with two columns, fact and detail, from this text.\n\n{extract}",
    "Which numbers appear in this text, and what does each one refer to?\n\n{extract}",
    "Classify this text as history, science, geography, arts, sport or other, and explain why.\n\n{extract}",
    "Write three multiple-choice questions about this text, with the correct answers marked.\n\n{extract}",
    "Find the single most important sentence in this text and explain your choice.\n\n{extract}",
    "Give a one-line answer: what is this text about?\n\n{extract}",
    "{extract}\n\nBased only on the text above, answer: when and where is {title} mentioned as being important?",
    "{extract}\n\nList the names in the text above in alphabetical order.",
    "Convert the following text into a short timeline.\n\n{extract}",
    "Summarise this text for {audience}.\n\n{extract}",
]

STEM = [
    lambda r, t: f"Explain {r.choice(STEM_CONCEPTS)}.",
    lambda r, t: "What is the difference between {} and {}?".format(*r.choice(STEM_PAIRS)),
    lambda r, t: f"Explain {r.choice(STEM_CONCEPTS)} to {r.choice(AUDIENCES)}.",
    lambda r, t: f"Describe a simple experiment that demonstrates {r.choice(STEM_CONCEPTS)}.",
    lambda r, t: f"What are common misconceptions about {r.choice(STEM_CONCEPTS)}?",
    lambda r, t: f"How would you explain {r.choice(STEM_CONCEPTS)} using an everyday analogy?",
    lambda r, t: f"Why does ice float on water? Relate it to {r.choice(['density', 'hydrogen bonds', 'everyday life'])}.",
    lambda r, t: f"What would happen if {r.choice(['the Earth stopped rotating', 'the Moon disappeared', 'gravity were twice as strong', 'there were no friction'])}?",
    lambda r, t: f"Explain the science behind {_title(r, t)}, if there is any.",
]

HUMANITIES_TASKS = [
    lambda r, t: f"What were the main causes and consequences of {r.choice(HUMANITIES)}?",
    lambda r, t: f"How did {r.choice(HUMANITIES)} change everyday life?",
    lambda r, t: f"Explain the idea of {r.choice(IDEAS)} and give an example.",
    lambda r, t: f"Discuss the arguments for and against the view that {r.choice(DEBATES)}.",
    lambda r, t: f"Compare {r.choice(HUMANITIES)} with {r.choice(HUMANITIES)}.",
    lambda r, t: f"Why do historians still study {r.choice(HUMANITIES)}?",
    lambda r, t: f"What can {_title(r, t)} teach us about {r.choice(IDEAS)}?",
    lambda r, t: f"Explain {r.choice(IDEAS)} using an example from {r.choice(HUMANITIES)}.",
]

ADVICE = [
    lambda r, t: f"How can I {r.choice(GOALS)}?",
    lambda r, t: f"What should I consider when {r.choice(DECISIONS)}?",
    lambda r, t: f"Give me step-by-step instructions to {r.choice(GOALS)}.",
    lambda r, t: f"I'm {r.choice(FEELINGS)}. What can I do?",
    lambda r, t: f"What are the most common mistakes people make when {r.choice(DECISIONS)}?",
    lambda r, t: f"Help me plan {r.choice(EVENTS)} on a small budget.",
    lambda r, t: f"My friend wants to {r.choice(GOALS)}. How can I support them?",
]

BRAINSTORM = [
    lambda r, t: f"Give me ten ideas for {r.choice(EVENTS)}.",
    lambda r, t: f"Brainstorm names for {r.choice(PRODUCTS)}.",
    lambda r, t: f"List creative ways to {r.choice(GOALS)}.",
    lambda r, t: f"Suggest five questions to ask {r.choice(PERSONAS)}.",
    lambda r, t: f"What are some fun facts about {_title(r, t)}?",
    lambda r, t: f"Suggest a theme and three activities for {r.choice(EVENTS)}.",
    lambda r, t: f"List the pros and cons of {r.choice(DECISIONS)}.",
]

FAMILIES = {
    "writing": WRITING,
    "roleplay": ROLEPLAY,
    "reasoning": REASONING,
    "extraction": EXTRACTION,
    "stem": STEM,
    "humanities": HUMANITIES_TASKS,
    "advice": ADVICE,
    "brainstorm": BRAINSTORM,
}


def task_prompt(rng: random.Random, articles: list[dict]) -> str:
    """One prompt from a family drawn uniformly, with an optional format instruction.
    ``articles`` are Wikipedia articles ``{title, extract}`` (for extraction and subjects)."""
    family = rng.choice(sorted(FAMILIES))
    templates = FAMILIES[family]
    if family == "extraction":
        art = rng.choice(articles)
        text = rng.choice(templates).format(extract=trim_text(art["extract"], 600), title=art["title"],
                                            audience=rng.choice(AUDIENCES))
        return text
    titles = [a["title"] for a in rng.sample(articles, min(3, len(articles)))] if articles else []
    return rng.choice(templates)(rng, titles) + rng.choice(FORMATS)
