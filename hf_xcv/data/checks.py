"""The check of a whole dataset before a training run claims its folder: every image decoded once (a streaming pass
with a progress bar), every problem collected and reported at once (:func:`refuse`), or the invalid rows dropped and
counted (:class:`DataReport`) when the user asks for it.

A problem names its split, its image (the file when the image has one, else its ``image_id`` or row), the
annotation (by id) when it is one annotation's, and what is wrong.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import PIL.Image
from datasets import Dataset, Image
from tqdm.auto import tqdm

from ..utils.errors import UsageError

LISTED_AT_MOST = 20  # problems listed in an error; the rest are counted


@dataclass(frozen=True)
class DataProblem:
    """One thing wrong with a dataset.

    Args:
        split: the split's name.
        what: what is wrong (``"object 0 has bbox [...], empty inside the 50x40 ... image"``, ``"does not decode:
            ..."``).
        row: the row of the split (what dropping removes or edits); -1 for an annotation of no row.
        image_id: the image's id, when the dataset has them.
        file: the image's file, when it has one.
        annotation: the annotation's id when the problem is one annotation's; None when it is the whole image's.
        index: the annotation's position in its row (what dropping removes).
    """

    split: str
    what: str
    row: int
    image_id: Any = None
    file: str | None = None
    annotation: Any = None
    index: int | None = None

    def __str__(self) -> str:
        details = [f"annotation {self.annotation}"] if self.annotation is not None else []
        if self.image_id is not None:
            where = f"image_id {self.image_id}"
        elif self.file or self.row >= 0:
            where = self.file or f"row {self.row}"
        else:  # an annotation of no image
            where, details = (details[0], []) if details else ("", [])
        details += [f"file {self.file}"] if self.file and self.file != where else []
        where = f"split {self.split!r}" + (f", {where}" if where else "")
        return f"{where}: {self.what}" + (f" [{', '.join(details)}]" if details else "")


@dataclass
class DataReport:
    """What a check dropped (with ``--drop_invalid_*``): counts, and the problems that caused it."""

    dropped_annotations: int = 0
    dropped_images: int = 0
    problems: list[DataProblem] = field(default_factory=list)

    def as_dict(self, annotations: bool = True) -> dict[str, int]:
        """The counts as ``all_results.json`` records them (under ``"data"``); ``annotations``: whether the data
        has annotations to count (detection)."""
        counts = {"dropped_annotations": self.dropped_annotations} if annotations else {}
        return counts | {"dropped_images": self.dropped_images}

    def summary(self, option: str, annotations: bool = True) -> str:
        """``"dropped 3 annotations and 1 image (--drop_invalid_annotations): ..."`` (the first problems listed)."""
        counts = _count(self.dropped_images, "image")
        if annotations:
            counts = f"{_count(self.dropped_annotations, 'annotation')} and {counts}"
        return f"dropped {counts} ({option}){_listing(self.problems)}"


def card_line(counts: dict[str, Any] | None, option: str) -> str | None:
    """``"Dropped before training (--drop_invalid_annotations): 3 annotations, 1 image."`` from the counts of
    :meth:`DataReport.as_dict` (as ``results["data"]`` holds them); None when nothing was dropped."""
    counts = counts or {}
    annotations, images = counts.get("dropped_annotations", 0), counts.get("dropped_images", 0)
    if not (annotations or images):
        return None
    parts = ([_count(annotations, "annotation")] if "dropped_annotations" in counts else []) + [_count(images, "image")]
    return f"Dropped before training ({option}): {', '.join(parts)}."


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _listing(problems: Sequence[DataProblem], describe: Callable[[DataProblem], str] = str) -> str:
    if not problems:
        return ""
    listed = ";\n  ".join(describe(problem) for problem in problems[:LISTED_AT_MOST])
    more = f";\n  ... and {len(problems) - LISTED_AT_MOST} more" if len(problems) > LISTED_AT_MOST else ""
    return f":\n  {listed}{more}"


def refuse(
    problems: Sequence[DataProblem], name: str, option: str | None, describe: Callable[[DataProblem], str] = str
) -> None:
    """Raise one UsageError listing every problem (the first :data:`LISTED_AT_MOST`, then their count; each as
    ``describe`` writes it); nothing when there is none. ``option`` is the flag that drops them instead, if any."""
    if not problems:
        return
    splits = list(dict.fromkeys(problem.split for problem in problems))
    rows = len({(p.split, p.row, p.annotation if p.row < 0 else None) for p in problems})
    where = f"split {splits[0]!r} of {name}" if len(splits) == 1 else f"{name} (splits {splits})"
    fix = f"fix them, or drop what is invalid with {option}" if option else "fix them"
    raise UsageError(f"{where} has {rows} bad row(s) ({len(problems)} problem(s)); {fix}{_listing(problems, describe)}")


# ----------------------------------------------------------------------------------------------- images


def progress(items: Iterable[Any], total: int, description: str, enabled: bool = True) -> Iterator[Any]:
    """``items`` with a tqdm progress bar (shown on a terminal only, and when ``enabled``)."""
    return iter(tqdm(items, total=total, desc=description, disable=None if enabled else True, leave=False))


def image_file(stored: Any) -> str | None:
    """The file of an image as ``datasets`` stores it (its ``path``), if it has one."""
    path = stored.get("path") if isinstance(stored, dict) else stored if isinstance(stored, str) else None
    return str(path) if path else None


def decode(stored: Any) -> tuple[tuple[int, int] | None, str | None]:
    """Decode an image as ``datasets`` stores it (``{"path", "bytes"}``, a path, or a decoded PIL image):
    ((width, height), None), or (None, what is wrong). The whole file is read, so a truncated one is caught."""
    if isinstance(stored, PIL.Image.Image):
        return stored.size, None
    source = stored
    if isinstance(stored, dict):
        source = io.BytesIO(stored["bytes"]) if stored.get("bytes") is not None else stored.get("path")
    if source is None:
        return None, "has no image (neither bytes nor a path)"
    try:
        with PIL.Image.open(source) as image:
            image.load()
            return image.size, None
    except (OSError, ValueError, SyntaxError, PIL.Image.DecompressionBombError) as err:
        return None, f"does not decode: {type(err).__name__}: {err}"


def stored_images(dataset: Dataset, column: str) -> Dataset:
    """``dataset`` with ``column`` not decoded (``{"path", "bytes"}`` per row), when it is an ``Image`` feature:
    what :func:`decode` reads, so a problem can name the file."""
    feature = dataset.features.get(column)
    if isinstance(feature, Image) and feature.decode:
        dataset = dataset.cast_column(column, Image(mode=feature.mode, decode=False))
    return dataset


def image_problems(
    dataset: Dataset,
    split: str,
    column: str = "image",
    image_ids: Sequence[Any] | None = None,
    enabled: bool = True,
) -> tuple[list[DataProblem], list[tuple[int, int] | None], list[str | None]]:
    """Decode every image of ``column``: the problems (images that do not decode), each row's (width, height)
    (None where it does not decode) and file (None where it has none). ``image_ids``: each row's, to name the images
    by."""
    rows = stored_images(dataset.with_format(None), column).select_columns([column])
    problems, sizes, files = [], [], []
    for i, row in enumerate(progress(rows, len(rows), f"checking the images of {split!r}", enabled)):
        size, problem = decode(row[column])
        sizes.append(size)
        files.append(image_file(row[column]))
        if problem is not None:
            image_id = image_ids[i] if image_ids is not None else None
            problems.append(DataProblem(split, problem, i, image_id, files[-1]))
    return problems, sizes, files


def drop_rows(dataset: Dataset, rows: Iterable[int]) -> Dataset:
    """``dataset`` without ``rows``."""
    gone = set(rows)
    return dataset.select([i for i in range(len(dataset)) if i not in gone]) if gone else dataset
