"""Memorable run names: adjective-animal-N, unique in the store."""

import random
from collections.abc import Callable

ADJECTIVES = (
    "amber",
    "bold",
    "brave",
    "calm",
    "clever",
    "cosy",
    "crisp",
    "dapper",
    "eager",
    "fancy",
    "fuzzy",
    "gentle",
    "giddy",
    "glad",
    "golden",
    "happy",
    "jolly",
    "keen",
    "lucky",
    "merry",
    "mighty",
    "nimble",
    "noble",
    "odd",
    "pink",
    "plucky",
    "proud",
    "quick",
    "quiet",
    "rapid",
    "shiny",
    "silent",
    "sleepy",
    "snowy",
    "spicy",
    "steady",
    "sunny",
    "swift",
    "tidy",
    "witty",
)
ANIMALS = (
    "ant",
    "bat",
    "bear",
    "bee",
    "cat",
    "cod",
    "crab",
    "crow",
    "deer",
    "dog",
    "dove",
    "duck",
    "eel",
    "elk",
    "emu",
    "fly",
    "fox",
    "frog",
    "gnu",
    "goat",
    "hare",
    "hawk",
    "ibis",
    "jay",
    "koala",
    "lamb",
    "lark",
    "lynx",
    "mole",
    "moth",
    "newt",
    "owl",
    "panda",
    "puma",
    "seal",
    "slug",
    "swan",
    "tiger",
    "toad",
    "wasp",
    "wolf",
    "yak",
    "zebra",
)


def new_run_name(taken: Callable[[str], bool], rng: random.Random | None = None) -> str:
    """A name like `pink-fly-1`; `taken(name)` says whether a name is in use."""
    rng = rng or random.Random()
    for attempt in range(1000):
        base = f"{rng.choice(ADJECTIVES)}-{rng.choice(ANIMALS)}"
        n = 1 + attempt // 100  # add a digit of room once collisions get common
        name = f"{base}-{rng.randint(1, 9 * n)}"
        if not taken(name):
            return name
    raise RuntimeError("could not find a free run name")
