"""The built-in translation task: English sentences and their translations into Velish.

Velish is an invented language, generated with the English from one grammar: no download, and
a seed gives the same sentences (4 to 16 English words, from a few hundred) on every platform.
It is built so that a translator must look across the sentence, not replace word by word:

- **Word order.** The finite verb comes second in a main clause and last in a subordinate
  one; a participle, infinitive or verb particle closes the clause (as in German). Adverbs
  and pronoun objects follow the finite verb, adjectives and owners ("the man's") follow the
  noun, "give X to Y" is "give Y X", numbers say the units first, and a fronted time adverb
  or clause puts the verb before the subject.
- **Agreement.** Nouns are masculine, feminine or neuter. Articles, possessives, "this" and
  adjectives take the ending of the noun's gender, number and case (subject, object, after
  a preposition, owner); a relative pronoun takes it too; the verb takes the subject's person
  and number, even when a relative clause stands between them.
- **One word, many translations.** "the" is ta, tan, tem, tes, te, ter, to, ti or ten; "her"
  is lan- before a noun and lak alone; "that" is ke after "says", a relative pronoun after a
  noun; "look at" and "look for" are different verbs.
- **Words that do not match one to one.** Compounds are one word (apple tree = melbom); a
  phrasal verb is one verb (throw away = jet ... ab); the past is two words (saw = habet ...
  gevidat); "does not" is nen; "in the" is nim; "thirteen" is tri e zen.

===================================================  ==============================================
en                                                   vel
===================================================  ==============================================
Our old children found this teacher.                 Nuni pima seni haben desan lerent getrovat.
The child throws away the basket.                    To pim jetet tan korb ab.
The old student gives big bananas to the teacher.    Ta studan sena gibet tem lerent bananen grandi.
Yesterday, we saw the guitar.                        Jeri habum nu te gitar gevidat.
Did they close the books?                            Haben vi ti liba tugemakat?
The duck washed us in the big park.                  Te anat habet nuk nim park grandem gelavat.
She says that I push a boy.                          La diket, ke jo unan pask pulsu.
Their student sometimes finds the man who drew you.  Vina studan trovet talv tan vir da dek gepiktat
                                                     habet.
===================================================  ==============================================

Word by word (.M masculine, .DAT dative, .PL plural): each ending repeats the noun's
gender, number and case, and the dative "teacher" comes before the object:

    Ta     studan   sena   gibet   tem     lerent   bananen   grandi.
    the.M  student  old.M  gives   the.DAT teacher  bananas   big.PL

The Velish clause, in order (VERB is the finite verb, REST a participle, infinitive or
particle; "place" a prepositional phrase):

    statement     subject VERB  pronouns time adverb objects place nen  REST
    inverted      time | clause | (question)  VERB subject  pronouns ... nen  REST
    subordinate   conjunction subject  pronouns adverb objects place nen  REST VERB
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path

from . import builtin_lexicon as lex
from .parallel import write_files

SOURCE_LANGUAGE = "en"   # a fragment of English
TARGET_LANGUAGE = "vel"  # Velish, an invented German-like language
SPLITS = ("train", "valid", "test")
MIN_WORDS, MAX_WORDS = 4, 16  # source sentence length in words
_TENSES = ("present", "past", "future")


@dataclass
class _Phrase:
    en: str                  # English as a subject
    en_obj: str              # English as an object ("I" -> "me")
    vel: tuple[str, ...]     # Velish nominative, accusative, dative, genitive
    person: int
    plural: bool
    pronoun: bool = False    # Velish moves a pronoun object forward


@dataclass
class _Clause:
    en: list[str]            # English, declarative order
    en_question: list[str]
    subject: list[str]       # Velish from here on
    finite: str              # the verb with the person ending
    middle: list[str]        # pronouns, adverbs, objects, prepositional phrase, negation
    end: list[str]           # main clause: participle, infinitive or verb particle
    sub_end: list[str]       # subordinate clause: the verbs, finite one last
    front: str               # a time adverb before the verb, or ""

    def main(self, inverted: bool = False) -> list[str]:
        """Verb second: after the subject, or before it when something else comes first."""
        if inverted or self.front:
            first = [self.front] if self.front else []
            return [*first, self.finite, *self.subject, *self.middle, *self.end]
        return [*self.subject, self.finite, *self.middle, *self.end]

    def subordinate(self) -> list[str]:
        return [*self.subject, *self.middle, *self.sub_end]


class _Grammar:
    """Draws sentence pairs from one ``random.Random``; every choice walks a tuple in order."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        by_english = {noun[0]: noun for noun in lex.NOUNS}
        compounds = []
        for modifier, head, tags in lex.COMPOUNDS:  # the head gives gender and plural
            m, h = by_english[modifier], by_english[head]
            compounds.append((f"{modifier} {h[0]}", f"{modifier} {h[1]}", m[2] + h[2], h[3], tags))
        self.words = {"noun": ((*lex.NOUNS, *compounds), 4), "adj": (lex.ADJECTIVES, 3),
                      "verb": ([v for v in lex.VERBS if v[5] == "tr"], 6), "frame": (lex.VERBS, 5)}
        self.pools: dict[tuple, tuple[list[tuple], list[float]]] = {}
        self.manner = [a for a in lex.ADJECTIVES if a[2]]

    def pick(self, kind: str, tags: str | tuple[str, ...]) -> tuple:
        """A noun with one of ``tags``, an adjective or transitive verb that fits such a noun,
        or a verb of one of the frames ``tags``. Words listed first come more often: the n-th
        with a chance proportional to 1 / (n + 4), as in Zipf's law."""
        if (kind, tags) not in self.pools:
            words, column = self.words[kind]
            pool = [w for w in words if any(t in w[column] for t in tags)]
            self.pools[kind, tags] = pool, list(itertools.accumulate(
                1 / (n + 4) for n in range(len(pool))))  # exact in IEEE: same on every platform
        pool, cum_weights = self.pools[kind, tags]
        return self.rng.choices(pool, cum_weights=cum_weights)[0]

    # ------------------------------------------------------------------ noun phrases
    def noun_phrase(self, tags: str, pronoun: bool = True, avoid: str = "",
                    embed: float = 0.0, plural_chance: float = 0.3) -> _Phrase:
        """A pronoun, a name or [determiner] [adjective] noun, in English and in Velish; with
        chance ``embed`` a relative clause or an owner ("the man's dog") comes with it."""
        rng = self.rng
        r = rng.random()
        if "p" in tags and pronoun and r < 0.22:
            choices = [p for p in lex.PRONOUNS if p[0] != avoid]
            en, en_obj, nom, obj, person, plural = rng.choice(choices)
            return _Phrase(en, en_obj, (nom, obj, obj, ""), person, plural, pronoun=True)
        if "p" in tags and r < 0.3:
            name = rng.choice(lex.NAMES)
            return _Phrase(name, name, (name, name, name, name + "s"), 3, False)
        en_sg, en_pl, stem, gender, noun_tags = self.pick("noun", tags)
        plural = rng.random() < plural_chance
        key = "pl" if plural else gender
        words_en = [en_pl if plural else en_sg]
        noun_vel = stem + lex.PLURAL_ENDINGS[gender] if plural else stem
        adj_stem, rest = "", []
        if rng.random() < 0.35:
            adj_en, adj_stem, _, _ = self.pick("adj", noun_tags)
            words_en.insert(0, adj_en)
        r = rng.random()
        det = lex.DETERMINERS[0 if r < 0.5 else 1 if r < 0.7 else 8 if r < 0.8 else
                              rng.randrange(2, 8)]
        det_en, det_vel, lead = det[2] if plural else det[0], det[1], []
        if det_en == "a" and words_en[0][0] in "aeiou":
            det_en = "an"
        if plural and det[0] == "a":  # a bare plural, without an article in either language
            det_en = det_vel = ""
        elif plural and rng.random() < 0.15:  # "thirty-four dogs": a number, no article
            det_en, number = lex.number_words(rng.randrange(2, 100))
            det_vel, lead = "", [number]
        r = rng.random()
        if r < embed / 2:  # "the man's dog": the owner comes first in English, last in Velish
            owner = self.noun_phrase("pa", pronoun=False, plural_chance=0.0)
            det_en, det_vel, lead, rest = owner.en + "'s", "t", [], [owner.vel[3]]
        elif r < embed:
            rel_en, rest = self.relative(noun_tags, key)
            words_en += rel_en
        en = " ".join([det_en, *words_en]) if det_en else " ".join(words_en)
        vel = []
        for ending in lex.DET_ENDINGS[key]:  # determiner and adjective share the ending
            words = [det_vel + ending] if det_vel else list(lead)
            words += [noun_vel, *([adj_stem + ending] if adj_stem else []), *rest]
            vel.append(" ".join(words))
        return _Phrase(en, en, tuple(vel), 3, plural)

    def relative(self, tags: str, key: str) -> tuple[list[str], list[str]]:
        """A relative clause after a noun: "who sees the cat" or "that the cat sees".

        The Velish relative pronoun (d + a determiner ending) takes the noun's gender and
        number and its case in the relative clause; the clause is verb-final.
        """
        rng, tense, plural = self.rng, self.rng.choice(_TENSES), key == "pl"
        nom, acc = ("d" + ending for ending in lex.DET_ENDINGS[key][:2])
        if ("p" in tags or "a" in tags) and rng.random() < 0.6:  # the noun is the subject
            verb = self.pick("verb", "pafltos")
            obj = self.noun_phrase(verb[6])
            group, _ = lex.english_verbs(verb, tense, third=not plural)
            *_, verbs = lex.velish_verbs(verb, tense, lex.VERB_ENDINGS[(3, plural)])
            return (["who" if "p" in tags else "that", *group, obj.en_obj],
                    [nom, obj.vel[1], *verbs])
        verb = self.pick("verb", tags)  # the noun is the object
        subj = self.noun_phrase("pa")
        group, _ = lex.english_verbs(verb, tense, third=subj.person == 3 and not subj.plural)
        *_, verbs = lex.velish_verbs(verb, tense, lex.VERB_ENDINGS[(subj.person, subj.plural)])
        return ["that", subj.en, *group], [acc, subj.vel[0], *verbs]

    def subject(self, tags: str, embed: float) -> _Phrase:
        if self.rng.random() < 0.06:  # "the dog and the cat": a plural subject
            a, b = (self.noun_phrase(tags, pronoun=False) for _ in range(2))
            vel = f"{a.vel[0]} {lex.AND} {b.vel[0]}"
            return _Phrase(f"{a.en} and {b.en}", "", (vel,) * 4, 3, True)
        return self.noun_phrase(tags, embed=embed)

    # ------------------------------------------------------------------ clauses
    def clause(self, main: bool, frame: str = "", question: bool = False,
               tenses: tuple[str, ...] = _TENSES, front: bool = False) -> _Clause:
        """One clause; ``front`` lets a time adverb open it ("Yesterday, ...")."""
        rng = self.rng
        verb = self.pick("frame", (frame,) if frame else ("tr", "in", "di"))
        frame, obj_tags = verb[5], verb[6]
        embed, extra = (0.3, 0.45) if main else (0.15, 0.25)  # subordinate clauses are shorter
        subj = self.subject("p" if frame in ("di", "cl") else "pa", embed)
        tense = rng.choice(tenses)
        negate = not question and rng.random() < 0.2
        adverb_en, adverb_vel, frequency = [], [], False
        if frame != "cl" and rng.random() < extra:
            frequency = not negate and rng.random() < 0.4  # "often" goes before the verb
            en, vel = rng.choice(lex.FREQUENCY_ADVERBS) if frequency else self.manner_adverb()
            adverb_en, adverb_vel = [en], [vel]
        objects_en, objects = [], []  # objects: (phrase, Velish case) in Velish order
        if frame in ("tr", "di"):
            obj = self.noun_phrase(obj_tags, avoid=subj.en, embed=embed)
            objects_en, objects = [obj.en_obj], [(obj, 1)]
            if frame == "di":  # English "X to Y", Velish Y (dative) X (accusative)
                to = self.noun_phrase("pa", avoid=subj.en)
                objects_en += ["to", to.en_obj]
                objects.insert(0, (to, 2))
        pp_en, pp_vel = [], []
        if frame != "cl" and rng.random() < extra:
            prep_en, prep_vel, contracted, case, tags = rng.choice(lex.PREPOSITIONS)
            np = self.noun_phrase(tags, avoid=subj.en)
            pp_en, np_vel = [prep_en, np.en_obj], np.vel[case]
            pp_vel = ([contracted, np_vel[4:]] if contracted and np_vel[:4] == "tem "
                      else [prep_vel, np_vel])  # ni tem park -> nim park
        time_en, time_vel, fronted = [], [], ""
        if main and not question and rng.random() < 0.15:
            time_en, time_vel = ([word] for word in rng.choice(lex.TIME_ADVERBS[tense]))
            if front and rng.random() < 0.5:
                fronted, time_vel = time_vel[0], []

        freq = tuple(adverb_en) if frequency else ()
        third = subj.person == 3 and not subj.plural
        group, aux = lex.english_verbs(verb, tense, third, negate, freq)
        rest = [*objects_en, *([] if frequency else adverb_en), *pp_en]
        en = [subj.en, *group, *rest]
        en = [*time_en, ",", *en] if fronted else en + time_en
        en_question = [aux, subj.en, *freq, verb[0], *rest]
        ending = lex.VERB_ENDINGS[(subj.person, subj.plural)]
        finite, end, sub_end = lex.velish_verbs(verb, tense, ending)
        middle = [*(p.vel[c] for p, c in objects if p.pronoun), *time_vel, *adverb_vel,
                  *(p.vel[c] for p, c in objects if not p.pronoun), *pp_vel,
                  *([lex.NOT] if negate else [])]
        return _Clause(en, en_question, [subj.vel[0]], finite, middle, end, sub_end, fronted)

    def manner_adverb(self) -> tuple[str, str]:
        """English "quickly", Velish adjective + im: rapim."""
        _, stem, adverb, _ = self.rng.choice(self.manner)
        return adverb, stem + lex.ADVERB_SUFFIX

    def subordinate(self) -> tuple[list[str], list[str]]:
        conj_en, conj_vel = self.rng.choice(lex.CONJUNCTIONS)
        # English uses no future after "when" and "if".
        c = self.clause(main=False, tenses=_TENSES[:2] if conj_en in ("when", "if") else _TENSES)
        return [conj_en, *c.en], [conj_vel, *c.subordinate()]

    # ------------------------------------------------------------------ sentences
    def sentence(self) -> tuple[str, str]:
        r = self.rng.random()
        if r < 0.1:  # a yes/no question: the Velish verb comes first
            c = self.clause(main=True, question=True)
            return _text(c.en_question, "?"), _text(c.main(inverted=True), "?")
        if r < 0.2:  # a fronted clause: the main verb comes before the subject
            sub_en, sub_vel = self.subordinate()
            c = self.clause(main=True)
            return (_text([*sub_en, ",", *c.en], "."),
                    _text([*sub_vel, ",", *c.main(inverted=True)], "."))
        c = self.clause(main=True, frame="cl" if r >= 0.75 else "", front=True)
        en, vel = c.en, c.main()
        if r >= 0.75:  # "says that ...": the second clause is subordinate, verb-final
            sub = self.clause(main=False)
            en, vel = [*en, "that", *sub.en], [*vel, ",", lex.THAT, *sub.subordinate()]
        elif r >= 0.5:
            sub_en, sub_vel = self.subordinate()
            en, vel = en + sub_en, [*vel, ",", *sub_vel]
        return _text(en, "."), _text(vel, ".")


def _text(words: list[str], stop: str) -> str:
    """Words (commas as their own items) -> a sentence with a capital and final punctuation."""
    text = " ".join(words).replace(" ,", ",")
    return text[0].upper() + text[1:] + stop


def builtin_task(seed: int = 0, n_train: int = 20000, n_valid: int = 500,
                 n_test: int = 500) -> dict[str, list[tuple[str, str]]]:
    """Sentence pairs (English, Velish) for "train", "valid" and "test".

    No source sentence appears twice, in one split or across splits. The test set is drawn
    first and the training set last, so asking for more training data keeps valid and test.
    """
    grammar = _Grammar(random.Random(seed))
    seen: set[str] = set()
    splits: dict[str, list[tuple[str, str]]] = {}
    for split, size in (("test", n_test), ("valid", n_valid), ("train", n_train)):
        pairs = splits[split] = []
        while len(pairs) < size:
            source, target = grammar.sentence()
            if source not in seen and MIN_WORDS <= len(source.split()) <= MAX_WORDS:
                seen.add(source)
                pairs.append((source, target))
    return {split: splits[split] for split in SPLITS}


def write_task(directory: str | Path, seed: int = 0, n_train: int = 20000, n_valid: int = 500,
               n_test: int = 500) -> Path:
    """Write ``{split}.en`` and ``{split}.vel`` (UTF-8, one sentence a line) into ``directory``.

    The six files are written whole or not at all: a failure (a full disk) raises OSError and
    leaves ``directory`` holding what it held before. DataError if something other than a file
    (a folder) has one of their names.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, pairs in builtin_task(seed, n_train, n_valid, n_test).items():
        for lang, column in ((SOURCE_LANGUAGE, 0), (TARGET_LANGUAGE, 1)):
            lines = "".join(pair[column] + "\n" for pair in pairs)
            files[directory / f"{split}.{lang}"] = lines.encode("utf-8")
    write_files(files, "the built-in task")
    return directory
