"""Module-level state that the corpus programs of test_corpus_decorators_and_globals.py read
and write from another module (each program resets it before it runs)."""

import torch

SCALE = 2.0
COUNT = 0
TENSOR = torch.ones(3)
ITEMS: list = []
TABLE: dict = {}


def bump(x):
    global COUNT
    COUNT += 1
    return x * SCALE


def set_scale(value):
    global SCALE
    SCALE = value


def reset():
    global SCALE, COUNT, TENSOR, ITEMS, TABLE
    SCALE, COUNT, TENSOR, ITEMS, TABLE = 2.0, 0, torch.ones(3), [], {}
