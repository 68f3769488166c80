"""The teachers' answers (lessons/answers/) stay true: every chapter has an answer file that
quotes each of its exercises word for word, with three to five questions; and every number an
answer marks with ``<!-- check: NAME -->`` equals what the library computes now
(tests/course/answers_checks.py), to the precision it is written with."""

import os
import re
from pathlib import Path

import answers_checks
import numpy as np
import pytest

import minitransformer as mt

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "lessons"
ANSWERS = LESSONS / "answers"
CHAPTERS = sorted(LESSONS.glob("[0-9][0-9]_*.py"))
SLOW = os.environ.get("MINITRANSFORMER_SLOW_ANSWERS") == "1"

# A number as an answer writes it: 2,097,152 / -1.2 / 4.7e-11 / 2.1 \times 10^{-20}
NUMBER = (r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
          r"(?:[eE][-+−]?\d+|\s*\\times\s*10\^\{?[-−]?\d+\}?)?")
# what a check reads: the number, list [a, b] (or [[a, b], [c, d]]) or tuple (a, b) just before
# the comment (or ending the line above it), with at most closing markup (`, *, $) and a short
# unit (%, ms, MB) between them
LIST = rf"\[\s*{NUMBER}(?:\s*,\s*{NUMBER})*\s*\]"
VALUE = re.compile(rf"(\[\s*{LIST}(?:\s*,\s*{LIST})*\s*\]|{LIST}|\(\s*{NUMBER}(?:\s*,\s*{NUMBER})*"
                   rf"\s*,?\s*\)|{NUMBER})[`*$]*\s*(?:%|[a-zA-Zµ]{{1,3}})?[`*$]*\s*$")
COMMENT = re.compile(r"<!--\s*check:\s*(\S+)((?:\s+[a-z]+(?:=\S+)?)*)\s*-->")


def _exercises(lesson: Path) -> list[str]:
    """The numbered items of a chapter's closing "Exercises" section, whitespace collapsed."""
    lines = lesson.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"#\s*## Exercises", line))
    items: list[str] = []
    for line in lines[start + 1:]:
        if not line.startswith("#") or line.startswith("# %%"):
            break
        text = line[1:].strip()
        if re.match(r"\d+\. ", text):
            items.append(text.split(". ", 1)[1])
        elif text and items:
            items[-1] += " " + text
    return [" ".join(item.split()) for item in items]


def _answer_file(lesson: Path) -> Path:
    return ANSWERS / f"{lesson.stem}.md"


def _quoted_exercises(text: str) -> dict[int, str]:
    """Exercise number -> the blockquote under its "### Exercise N" heading."""
    quoted = {}
    for match in re.finditer(r"^### Exercise (\d+)\n+((?:>.*\n)+)", text, re.M):
        quote = " ".join(line[1:].strip() for line in match.group(2).splitlines())
        quoted[int(match.group(1))] = " ".join(quote.split())
    return quoted


def _questions(text: str) -> list[str]:
    section = text.split("\n## Questions\n", 1)
    if len(section) < 2:
        return []
    body = re.split(r"\n## ", section[1], maxsplit=1)[0]
    return re.findall(r"^\d+\. \*\*(.+?)\*\*", body, re.M)


@pytest.mark.parametrize("lesson", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_exercise_is_answered(lesson):
    answer = _answer_file(lesson)
    assert answer.exists(), f"no answers for {lesson.name}: write {answer.relative_to(ROOT)}"
    exercises, quoted = _exercises(lesson), _quoted_exercises(answer.read_text())
    assert exercises, f"{lesson.name} has no exercises section"
    assert sorted(quoted) == list(range(1, len(exercises) + 1)), (
        f"{answer.name} answers exercises {sorted(quoted)}, the chapter has {len(exercises)}")
    for number, exercise in enumerate(exercises, 1):
        assert quoted[number] == exercise, (
            f"{answer.name}, exercise {number}: the chapter's text changed, update the quote "
            f"and its answer.\nchapter: {exercise}\nanswer:  {quoted[number]}")


@pytest.mark.parametrize("lesson", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_chapter_has_three_to_five_questions(lesson):
    answer = _answer_file(lesson)
    assert answer.exists()
    assert 3 <= len(_questions(answer.read_text())) <= 5


def test_the_index_lists_every_answer_file():
    index = (ANSWERS / "README.md").read_text()
    for answer in sorted(ANSWERS.glob("[0-9][0-9]_*.md")):
        assert f"({answer.name})" in index, f"README.md does not link {answer.name}"


def _parse(written: str) -> list[tuple[float, float]]:
    """(value, half a unit of its last written digit) for each number of ``written``."""
    numbers = []
    for token in re.findall(NUMBER, written.replace("−", "-")):
        token = token.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?.*",
                                                       token) else token
        latex = re.match(r"(.+?)\s*\\times\s*10\^\{?(-?\d+)\}?", token)
        mantissa, exponent = (latex.group(1), int(latex.group(2))) if latex else (token, 0)
        if "e" in mantissa.lower():
            mantissa, e = re.split("[eE]", mantissa)
            exponent += int(e)
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        numbers.append((float(mantissa) * 10.0 ** exponent, 0.5 * 10.0 ** (exponent - decimals)))
    return numbers


def _marks() -> list[tuple[str, int, str, str, str]]:
    """(file, line, check name, written value, options) for every check comment."""
    marks = []
    for answer in sorted(ANSWERS.glob("*.md")):
        lines = answer.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            for comment in COMMENT.finditer(line):
                before = re.sub(r"<!--.*?-->", "", line[:comment.start()])
                if not before.strip() and number > 1:  # a comment opening the next line
                    before = re.sub(r"<!--.*?-->", "", lines[number - 2])
                value = VALUE.search(before)
                written = value.group(1) if value else ""
                marks.append((answer.name, number, comment.group(1), written,
                              comment.group(2).strip()))
    return marks


MARKS = _marks()


def test_every_check_is_used_and_defined():
    used = {name for _, _, name, _, _ in MARKS}
    assert not used - set(answers_checks.CHECKS), "answers name checks that do not exist"
    assert not set(answers_checks.CHECKS) - used, "checks that no answer uses"


@pytest.fixture(scope="module")
def one_thread():
    """The checks build small models: one thread is many times faster than a pool of workers
    on a busy machine, and gives the same numbers."""
    threads = mt.get_num_threads()
    mt.set_num_threads(1)
    yield
    mt.set_num_threads(threads)


@pytest.mark.parametrize("mark", MARKS, ids=[f"{m[0][:2]}:{m[1]}:{m[2]}" for m in MARKS])
def test_the_numbers_in_the_answers_are_current(mark, one_thread):
    file, line, name, written, options = mark
    assert written, f"{file}:{line}: no number written just before the check {name}"
    check = answers_checks.CHECKS[name]
    if check.slow and not SLOW:
        pytest.skip("a measurement: run with MINITRANSFORMER_SLOW_ANSWERS=1")
    computed = check.function()
    computed = np.ravel(np.asarray(computed, dtype=float)).tolist()  # a number, list, shape
    stated = _parse(written)
    assert len(computed) == len(stated), f"{file}:{line}: {name} gives {computed}, the " \
                                         f"answer writes {written}"
    opts = dict(o.split("=") if "=" in o else (o, "") for o in options.split())
    for got, (value, half_unit) in zip(computed, stated, strict=True):
        where = f"{file}:{line}: {name} is {got!r} now, the answer says {written}"
        if "below" in opts:    # a bound: the written number, or the one given
            assert got < float(opts["below"] or value), where
        elif "above" in opts:
            assert got > float(opts["above"] or value), where
        elif "factor" in opts:
            factor = float(opts["factor"])
            assert value / factor <= got <= value * factor, where
        else:
            tol = float(opts["tol"]) if "tol" in opts else half_unit * (1 + 1e-9)
            assert abs(got - value) <= tol, where
