"""The built-in English -> Velish task: deterministic splits, files, and the grammar really
carrying the phenomena its docstring promises (word order, agreement, no word-for-word map)."""

import hashlib
import os
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from minitransformer.data import builtin_lexicon as lex
from minitransformer.data.builtin import (
    MAX_WORDS,
    MIN_WORDS,
    SOURCE_LANGUAGE,
    SPLITS,
    TARGET_LANGUAGE,
    _Grammar,
    builtin_task,
    write_task,
)
from minitransformer.data.errors import DataError

PRONOUNS = {p[0].capitalize(): (p[4], p[5]) for p in lex.PRONOUNS}  # "We" -> (1, True)
NOUN = {n[0]: n for n in lex.NOUNS}                   # "dog" -> ("dog", "dogs", "kan", ...)
GENDER = {n[0]: n[3] for n in lex.NOUNS}              # "dog" -> "m"
ADJECTIVE = {a[0]: a[1] for a in lex.ADJECTIVES}      # "big" -> "grand"
ARTICLES = {"t" + e for endings in lex.DET_ENDINGS.values() for e in endings}  # ta, tan, ...
# Every form a Velish verb can carry its person ending in (vid-et, an-rop-et, hab-et, vol-et).
FINITE = {prefix + stem + ending
          for _, _, _, stem, particle, *_ in lex.VERBS
          for prefix in {"", particle}
          for ending in lex.VERB_ENDINGS.values()}
FINITE |= {aux + e for aux in (lex.PERFECT_AUX, lex.FUTURE_AUX) for e in lex.VERB_ENDINGS.values()}
ENGLISH_VERB_WORDS = {form.split()[-1] for v in lex.VERBS for form in v[:3]}


def words(sentence):
    return re.findall(r"[\w'-]+", sentence)


@pytest.fixture(scope="module")
def task():
    return builtin_task()


@pytest.fixture(scope="module")
def pairs(task):
    return [pair for split in SPLITS for pair in task[split]]


def test_same_seed_same_pairs_other_seed_other_pairs():
    a = builtin_task(seed=3, n_train=300, n_valid=50, n_test=50)
    assert a == builtin_task(seed=3, n_train=300, n_valid=50, n_test=50)
    b = builtin_task(seed=4, n_train=300, n_valid=50, n_test=50)
    assert a["train"] != b["train"] and a["test"] != b["test"]


def test_seed_zero_gives_these_bytes_on_every_platform():
    # A change here changes every user's data set: make it on purpose, then update the hash.
    task = builtin_task(seed=0, n_train=200, n_valid=20, n_test=20)
    assert task["test"][0] == (
        "Mia hoped that a quiet goat will eat an egg for the singers.",
        "Mia habet geesperat, ke une kapr sile uno ov pro ti kantoren manjar volet.")
    digest = hashlib.sha256(repr(task).encode()).hexdigest()
    assert digest == "ca1fe211ff3030ec6a27c253a26f28880d534905319b631b08df842f9873c153"


def test_more_training_data_keeps_valid_and_test():
    small = builtin_task(seed=1, n_train=100, n_valid=30, n_test=30)
    large = builtin_task(seed=1, n_train=400, n_valid=30, n_test=30)
    assert small["valid"] == large["valid"] and small["test"] == large["test"]


def test_split_sizes(task):
    assert list(task) == ["train", "valid", "test"]
    assert [len(task[s]) for s in SPLITS] == [20000, 500, 500]
    sizes = builtin_task(n_train=7, n_valid=2, n_test=0)
    assert [len(sizes[s]) for s in SPLITS] == [7, 2, 0]


def test_no_source_sentence_twice_within_or_across_splits(pairs):
    sources = [source for source, _ in pairs]
    assert len(set(sources)) == len(sources)


def test_sentences_look_like_sentences(pairs):
    for source, target in pairs:
        for text in (source, target):
            assert text == text.strip() and "  " not in text and "\n" not in text
            assert text[0].isupper() and text[-1] in ".?"
        assert source[-1] == target[-1]  # a question stays a question
        assert MIN_WORDS <= len(source.split()) <= MAX_WORDS


def test_the_translation_is_a_function_of_the_source():
    # Before deduplication: whenever the grammar draws the same English twice, it has drawn
    # the same Velish, so the task has one right answer per sentence.
    grammar, seen = _Grammar(random.Random(0)), {}
    for _ in range(30000):
        source, target = grammar.sentence()
        assert seen.setdefault(source, target) == target


def test_vocabulary_is_a_few_hundred_words(task):
    source = Counter(w.lower() for s, _ in task["train"] for w in words(s))
    target = Counter(w.lower() for _, t in task["train"] for w in words(t))
    assert 300 <= len(source) <= 1000
    assert 500 <= len(target) <= 2000  # more forms: endings for gender, case and person


def test_no_velish_word_form_belongs_to_two_english_words():
    owner = defaultdict(set)
    for en, _, stem, gender, _ in lex.NOUNS:
        owner[stem].add(en)
        owner[stem + lex.PLURAL_ENDINGS[gender]].add(en)
    for en, stem, adverb, _ in lex.ADJECTIVES:
        for ending in lex.DET_ENDINGS.values():
            for e in ending:
                owner[stem + e].add(en)
        if adverb:
            owner[stem + lex.ADVERB_SUFFIX].add(adverb)
    for en, stem, _ in (*lex.DETERMINERS, ("who", "d", "")):
        for ending in lex.DET_ENDINGS.values():
            for e in ending:
                owner[stem + e].add(en)
    for en, en_obj, nom, obj, *_ in lex.PRONOUNS:
        owner[nom].add(en)
        owner[obj].add(en_obj + " (object)")
    for form in FINITE:
        owner[form].add("a verb")
    for particle in {v[4] for v in lex.VERBS} - {""}:
        owner[particle].add("a verb particle")
    numbers = [*zip(lex.NUMBERS_EN[1:], lex.NUMBERS_VEL[1:], strict=True), ("ten", lex.TEN_VEL),
               *((lex.TENS_EN[i], lex.NUMBERS_VEL[i] + lex.TEN_VEL) for i in range(2, 10)),
               ("-", lex.NUMBER_AND)]
    for en, vel in (*lex.FREQUENCY_ADVERBS, *lex.CONJUNCTIONS,
                    *(p[:2] for p in lex.PREPOSITIONS),
                    *((p[0] + " the", p[2]) for p in lex.PREPOSITIONS if p[2]),
                    *(a for adverbs in lex.TIME_ADVERBS.values() for a in adverbs),
                    *((name, name) for name in lex.NAMES), *numbers,
                    ("that", lex.THAT), ("and", lex.AND), ("not", lex.NOT)):
        for word in vel.split():
            owner[word].add(en)
    shared = {form: english for form, english in owner.items() if len(english) > 1}
    assert not shared


def test_numbers_say_the_units_first():
    assert lex.number_words(2) == ("two", "bi")
    assert lex.number_words(13) == ("thirteen", "tri e zen")
    assert lex.number_words(20) == ("twenty", "bizen")
    assert lex.number_words(34) == ("thirty-four", "kvar e trizen")
    assert lex.number_words(99) == ("ninety-nine", "nau e nauzen")


def test_write_task_writes_one_sentence_a_line(tmp_path):
    out = write_task(tmp_path / "builtin", seed=2, n_train=40, n_valid=5, n_test=5)
    task = builtin_task(seed=2, n_train=40, n_valid=5, n_test=5)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"{s}.{lang}" for s in SPLITS
                           for lang in (SOURCE_LANGUAGE, TARGET_LANGUAGE))
    for split in SPLITS:
        src = (out / f"{split}.{SOURCE_LANGUAGE}").read_text(encoding="utf-8")
        tgt = (out / f"{split}.{TARGET_LANGUAGE}").read_text(encoding="utf-8")
        assert src.splitlines() == [s for s, _ in task[split]]
        assert tgt.splitlines() == [t for _, t in task[split]]
        assert src.endswith("\n") and "\r" not in src



def task_files(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}  # hidden temporaries too


def test_a_full_disk_leaves_the_folder_as_it_was(tmp_path, disk_full_at_the_second_file):
    """A full disk once left a truncated train.en of 1,048,576 bytes (the tmpfs's size)."""
    folder = tmp_path / "builtin"
    folder.mkdir()
    (folder / "train.en").write_bytes(b"my own sentences\n")
    (folder / "notes.txt").write_bytes(b"kept\n")
    before = task_files(folder)
    writes = disk_full_at_the_second_file
    with pytest.raises(OSError, match="No space left on device"):
        write_task(folder, seed=2, n_train=40, n_valid=5, n_test=5)
    assert len(writes) == 2
    assert task_files(folder) == before


def test_a_failed_rename_puts_back_the_files_already_replaced(tmp_path, monkeypatch):
    """All six files or none: the task's splits come from one seed, and a mix of two seeds
    would repeat sentences across splits."""
    folder = write_task(tmp_path / "builtin", seed=1, n_train=40, n_valid=5, n_test=5)
    before = task_files(folder)
    real_replace = os.replace

    def replace(source, target):
        # valid.vel's new file, after train.* and valid.en were renamed into place
        if ".tmp" in Path(source).name and Path(target).name == "valid.vel":
            raise OSError(13, "Permission denied")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="Permission denied"):
        write_task(folder, seed=2, n_train=40, n_valid=5, n_test=5)
    assert task_files(folder) == before


def test_a_second_run_replaces_the_files_and_leaves_nothing_else(tmp_path):
    folder = write_task(tmp_path / "builtin", seed=1, n_train=40, n_valid=5, n_test=5)
    write_task(folder, seed=2, n_train=40, n_valid=5, n_test=5)
    assert task_files(folder) == task_files(
        write_task(tmp_path / "fresh", seed=2, n_train=40, n_valid=5, n_test=5))


def test_a_folder_in_the_way_is_refused_before_anything_is_written(tmp_path):
    folder = tmp_path / "builtin"
    (folder / "test.vel").mkdir(parents=True)
    (folder / "test.vel" / "mine.txt").write_text("kept\n")
    with pytest.raises(DataError, match=r"test\.vel is a folder .* move it away or write to "
                                        r"another folder\."):
        write_task(folder, seed=2, n_train=40, n_valid=5, n_test=5)
    assert [p.name for p in folder.iterdir()] == ["test.vel"]
    assert (folder / "test.vel" / "mine.txt").read_text() == "kept\n"

# ---------------------------------------------------------------------- the phenomena
def simple_with_pronoun_subject(pairs):
    """One-clause statements that open with a pronoun: "She picks up the key." """
    for source, target in pairs:
        first = source.split()[0]
        if first in PRONOUNS and source.endswith(".") and "," not in source + target:
            yield first, source, target


def test_verb_agrees_with_the_subject(pairs):
    endings = Counter()
    for pronoun, _, target in simple_with_pronoun_subject(pairs):
        finite = target.split()[1]  # verb second in a main clause
        assert finite in FINITE
        assert finite.endswith(lex.VERB_ENDINGS[PRONOUNS[pronoun]])
        endings[lex.VERB_ENDINGS[PRONOUNS[pronoun]]] += 1
    assert len(endings) == 5 and min(endings.values()) > 50


def test_article_and_adjective_agree_with_the_noun(pairs):
    # "The big dog ..." -> "Ta kan granda ...": article and adjective share the ending of
    # the noun's gender (nominative singular), so "the" has one form per gender.
    articles = defaultdict(set)
    for source, target in pairs:
        en, vel = source.split(), target.split()
        if en[0] == "The" and en[1] in ADJECTIVE and en[2] in GENDER and en[3] not in GENDER:
            ending = lex.DET_ENDINGS[GENDER[en[2]]][0]
            assert vel[0] == "T" + ending
            assert vel[2] == ADJECTIVE[en[1]] + ending  # after the noun
            articles[GENDER[en[2]]].add(vel[0])
    assert articles == {"m": {"Ta"}, "f": {"Te"}, "n": {"To"}}


def test_the_has_many_translations(pairs):
    # The same English word becomes different Velish words depending on gender, number and
    # case: the article "the" alone shows up as at least eight forms.
    forms = {w for _, target in pairs for w in target.lower().split() if w in ARTICLES}
    assert len(forms) >= 8


def test_subordinate_clause_ends_in_its_verb(pairs):
    # "..., that the dog sees the cat." -> "..., ke ta kan te mis videt.": English keeps the
    # verb before its object, Velish moves it to the end of the clause.
    moved = total = 0
    for source, target in pairs:
        if " that " in source and f", {lex.THAT} " in target and target.endswith("."):
            total += 1
            assert target[:-1].split()[-1] in FINITE
            moved += words(source)[-1] not in ENGLISH_VERB_WORDS
    assert total > 1000 and moved / total > 0.5


def test_past_is_split_around_the_object(pairs):
    # "She saw the dog." -> "La habet tan kan gevidat.": one English word, two Velish words,
    # with the object between them.
    found = 0
    for _, source, target in simple_with_pronoun_subject(pairs):
        en, vel = source[:-1].split(), target[:-1].split()
        if len(en) == 4 and en[2] == "the" and en[3] in GENDER and en[1] in {v[2] for v in
                                                                           lex.VERBS}:
            assert vel[1].startswith(lex.PERFECT_AUX) and lex.PARTICIPLE[0] in vel[-1]
            assert len(vel) == 5 and vel[2].startswith("t")
            found += 1
    assert found > 10


def test_not_word_for_word(pairs):
    differ = sum(len(words(s)) != len(words(t)) for s, t in pairs)
    assert differ / len(pairs) > 0.5
    # a compound is one Velish word, a phrasal verb is split around its object
    apple_tree = NOUN["apple"][2] + NOUN["tree"][2]
    assert any("apple tree" in s and apple_tree in t.split() for s, t in pairs)
    assert any(s.split()[1:3] == ["picks", "up"] and t.endswith(" op.") for s, t in pairs)
