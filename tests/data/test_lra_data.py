"""The Long Range Arena–style generators (hf_xcv.data.lra): deterministic by seed, labels right, classes balanced."""

from __future__ import annotations

from collections import Counter, deque

import numpy as np
import pytest

from hf_xcv.data.lra import (
    LISTOPS_VOCAB,
    apply_listops,
    decode_listops,
    load_listops_dataset,
    load_lra_dataset,
    load_lra_image_dataset,
    load_pathfinder_dataset,
    pathfinder_example,
)

SMALL_LISTOPS = dict(num_train=60, num_validation=20, num_test=20, min_length=20, max_length=80)
SMALL_PATHFINDER = dict(num_train=24, num_validation=8, num_test=9)


def evaluate_listops(tokens: list[str]) -> int:
    """An evaluator written apart from the generator: a stack machine over the symbols, left to right."""
    stack: list = []
    for token in tokens:
        if token == "]":
            arguments = []
            while not isinstance(stack[-1], str):
                arguments.append(stack.pop())
            operator = stack.pop()
            ordered = sorted(arguments)
            middle = len(ordered) // 2
            # the median rounded down: the middle value, or the floor of the two middle values' mean
            median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) // 2
            stack.append(
                {"[MAX": max(arguments), "[MIN": min(arguments), "[SM": sum(arguments) % 10, "[MED": median}[operator]
            )
        elif token.startswith("["):
            stack.append(token)
        else:
            stack.append(int(token))
    assert len(stack) == 1, "an expression is one tree"
    return stack[0]


@pytest.fixture(scope="module")
def listops():
    return load_listops_dataset(**SMALL_LISTOPS, seed=3)


def test_listops_is_deterministic_by_seed(listops):
    again = load_listops_dataset(**SMALL_LISTOPS, seed=3)
    other = load_listops_dataset(**SMALL_LISTOPS, seed=4)
    for split in listops:
        assert listops[split]["input_ids"] == again[split]["input_ids"]
        assert listops[split]["label"] == again[split]["label"]
    assert listops["train"]["input_ids"] != other["train"]["input_ids"]


def test_listops_labels_match_an_independent_evaluator(listops):
    checked = 0
    for split in listops.values():
        for row in split:
            tokens = decode_listops(row["input_ids"])
            assert evaluate_listops(tokens) == row["label"]
            checked += 1
    assert checked == 100


def test_listops_lengths_padding_and_operators(listops):
    operators = Counter()
    for row in listops["train"]:
        assert len(row["input_ids"]) == 80  # padded to max_length
        assert 20 <= row["length"] <= 80
        assert row["attention_mask"] == [1] * row["length"] + [0] * (80 - row["length"])
        assert all(i == 0 for i in row["input_ids"][row["length"] :])
        assert 0 not in row["input_ids"][: row["length"]]
        operators.update(t for t in decode_listops(row["input_ids"]) if t.startswith("["))
    assert set(operators) == {"[MAX", "[MIN", "[MED", "[SM"}  # every operator appears
    assert listops["train"].features["label"].names == [str(d) for d in range(10)]
    assert LISTOPS_VOCAB[0] == "<pad>" and len(LISTOPS_VOCAB) == 16


def test_listops_classes_are_balanced(listops):
    assert Counter(listops["train"]["label"]) == {label: 6 for label in range(10)}
    assert Counter(listops["validation"]["label"]) == {label: 2 for label in range(10)}
    odd = load_listops_dataset(num_train=13, num_validation=10, num_test=10, min_length=8, max_length=30)
    assert sorted(Counter(odd["train"]["label"]).values()) == [1] * 7 + [2] * 3


def test_medians_round_down_like_numpy():
    assert evaluate_listops("[MED 1 2 ]".split()) == 1 == apply_listops("[MED", [1, 2])  # 1.5 -> 1
    assert evaluate_listops("[MED 9 2 4 ]".split()) == 4 == apply_listops("[MED", [9, 2, 4])
    assert apply_listops("[MED", [3, 8, 0, 9]) == 5 and apply_listops("[SM", [7, 8]) == 5


def test_listops_settings_that_cannot_reach_the_length_fail_instead_of_looping():
    with pytest.raises(ValueError, match="no expression of 20-40 symbols.*max_depth=1"):
        load_listops_dataset(num_train=2, num_validation=1, num_test=1, min_length=20, max_length=40, max_depth=1)


def connected(solid: np.ndarray, start: tuple[int, int], goal: tuple[int, int]) -> bool:
    """8-connected flood fill over the drawn (undashed) pixels: written apart from the generator."""
    seen, queue = {start}, deque([start])
    while queue:
        y, x = queue.popleft()
        if (y, x) == goal:
            return True
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                n = (y + dy, x + dx)
                if 0 <= n[0] < solid.shape[0] and 0 <= n[1] < solid.shape[1] and solid[n] and n not in seen:
                    seen.add(n)
                    queue.append(n)
    return False


@pytest.mark.parametrize("settings", [{}, {"num_distractors": 2, "path_length": 10, "gap_length": 2}])
def test_pathfinder_labels_are_the_connectivity_of_the_marks(settings):
    rng = np.random.default_rng(0)
    for i in range(40):
        example = pathfinder_example(rng, i % 2, **settings)
        (y1, x1), (y2, x2) = example.marks
        assert connected(example.solid, example.marks[0], example.marks[1]) == bool(example.label)
        # both marks are drawn as bright 3x3 squares in the image the model sees
        assert (example.image[y1 - 1 : y1 + 2, x1 - 1 : x1 + 2] == 255).all()
        assert (example.image[y2 - 1 : y2 + 2, x2 - 1 : x2 + 2] == 255).all()
        # the dashes leave gaps: the drawn image is the solid one with pixels removed
        assert (example.image <= example.solid).all()


def test_pathfinder_images_hold_the_same_paths_whatever_the_label():
    """Counting paths or bright pixels must not tell the label: every image has 2 + num_distractors paths."""
    rng = np.random.default_rng(1)
    for i in range(20):
        example = pathfinder_example(rng, i % 2, num_distractors=1, path_intensity=128)
        assert components(example.solid) == 3
        assert (example.solid == 255).sum() == 18  # two 3x3 marks, paths drawn at 128


def components(solid: np.ndarray) -> int:
    remaining = {tuple(p) for p in np.argwhere(solid > 0)}
    count = 0
    while remaining:
        start = remaining.pop()
        count += 1
        queue = deque([start])
        while queue:
            y, x = queue.popleft()
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    if (y + dy, x + dx) in remaining:
                        remaining.remove((y + dy, x + dx))
                        queue.append((y + dy, x + dx))
    return count


def test_the_distance_between_the_marks_does_not_tell_the_label():
    """Positive marks end one path, so they lie one path's reach apart; negatives are kept only where the other
    path has an end at that reach too. The best distance threshold (fitted on half) scores near chance on the rest."""
    rng = np.random.default_rng(2)
    examples = [pathfinder_example(rng, i % 2, image_size=16, path_length=8, num_distractors=0) for i in range(600)]
    distance = np.array([np.hypot(*np.subtract(*e.marks)) for e in examples])
    label = np.array([e.label for e in examples])
    fit, held = slice(0, 300), slice(300, 600)
    rules = [(t, near) for t in np.unique(distance) for near in (True, False)]
    t, near = max(rules, key=lambda r: (((distance[fit] <= r[0]) == r[1]) == label[fit]).mean())
    assert (((distance[held] <= t) == near) == label[held]).mean() < 0.6
    # without the matching (match_distance large), the distance gives the label away
    rng = np.random.default_rng(2)
    loose = [pathfinder_example(rng, i % 2, image_size=16, path_length=8, match_distance=99) for i in range(300)]
    far = np.array([np.hypot(*np.subtract(*e.marks)) for e in loose])
    assert far[0::2].std() > 1.5 * far[1::2].std()  # negatives' marks anywhere, positives' one path's reach apart


def test_pathfinder_dataset_is_deterministic_balanced_and_flat():
    data = load_pathfinder_dataset(**SMALL_PATHFINDER, seed=5)
    again = load_pathfinder_dataset(**SMALL_PATHFINDER, seed=5)
    assert data["train"]["input_ids"] == again["train"]["input_ids"]
    assert data["train"]["input_ids"] != load_pathfinder_dataset(**SMALL_PATHFINDER, seed=6)["train"]["input_ids"]
    assert Counter(data["train"]["label"]) == {0: 12, 1: 12}
    assert sorted(Counter(data["test"]["label"]).values()) == [4, 5]
    row = data["train"][0]
    assert len(row["input_ids"]) == 32 * 32 and set(row["attention_mask"]) == {1}
    assert max(row["input_ids"]) == 255
    assert data["train"].features["label"].names == ["disconnected", "connected"]


def test_pathfinder_difficulty_settings_change_the_images():
    easy = load_pathfinder_dataset(**SMALL_PATHFINDER, num_distractors=0, gap_length=0)
    hard = load_pathfinder_dataset(**SMALL_PATHFINDER, num_distractors=3, gap_length=2)
    lit = lambda data: np.count_nonzero(np.array(data["train"]["input_ids"]))  # noqa: E731
    assert lit(hard) > lit(easy)


def test_image_task_is_the_digits_upscaled():
    data = load_lra_image_dataset()
    assert {name: len(split) for name, split in data.items()} == {"train": 1439, "validation": 179, "test": 179}
    row = data["train"][0]
    assert len(row["input_ids"]) == 1024 and 0 <= min(row["input_ids"]) and max(row["input_ids"]) <= 255
    counts = Counter(data["train"]["label"])
    assert len(counts) == 10 and max(counts.values()) <= 1.1 * min(counts.values())  # digits are balanced
    small = load_lra_image_dataset(image_size=8)
    assert len(small["test"][0]["input_ids"]) == 64
    assert small["test"]["label"] == data["test"]["label"]
    assert load_lra_dataset("image")["test"]["input_ids"] == data["test"]["input_ids"]  # deterministic


@pytest.mark.parametrize(
    ("task", "settings", "message"),
    [
        ("listops", {"min_length": 50, "max_length": 40}, "min_length <= max_length"),
        ("listops", {"num_train": 0}, "num_train must be a positive int"),
        ("listops", {"max_args": 1}, "max_args >= 2"),
        ("pathfinder", {"path_length": 2}, "path_length must be an int >= 4"),
        ("pathfinder", {"max_turn": 4.0}, "max_turn must be in"),
        ("pathfinder", {"path_intensity": 0}, "path_intensity must be an int grey level in"),
        ("image", {"image_size": 4}, "image_size must be an int >= 8"),
    ],
)
def test_bad_settings_are_refused_by_name(task, settings, message):
    with pytest.raises(ValueError, match=message):
        load_lra_dataset(task, **settings)


def test_unknown_task_and_impossible_pathfinder_are_refused():
    with pytest.raises(ValueError, match="unknown LRA task 'text'"):
        load_lra_dataset("text")
    with pytest.raises(ValueError, match="could not place 12 paths"):
        pathfinder_example(np.random.default_rng(0), 1, image_size=12, path_length=10, num_distractors=10, max_tries=5)
