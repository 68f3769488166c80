"""Scoring translations with sacreBLEU: BLEU (§6.1, Table 2) and chrF; translating a test set
and scoring it (``score``, what ``evaluate`` runs; ``score_test_set``, what ``train`` runs at
its end).

BLEU scores differ by several points with the tokenization and casing they are computed on,
so the paper-comparable number is sacreBLEU's on detokenized, cased text (its defaults: the
13a tokenizer, mixed case, one reference per sentence), reported with its *signature*, the
string that says exactly how it was computed (Post, 2018, "A Call for Clarity in Reporting
BLEU Scores"):

    corpus_bleu(["the cat sat"], ["the cat sat"])   ->  Score(name="BLEU", score=100.0, ...)
    str(score)   ->  "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = 100.00 ..."

Hypotheses are whole sentences as the model's tokenizer decodes them, never token ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.parallel import write_lines
from .translator import load_translator, translate, translate_n_best


@dataclass(frozen=True)
class Score:
    """A corpus-level score: ``name`` ("BLEU", "chrF2"), ``score`` (0 to 100), sacreBLEU's
    ``signature`` and its one-line ``report`` (n-gram precisions, brevity penalty, ...)."""

    name: str
    score: float
    signature: str
    report: str = ""

    def __str__(self) -> str:
        return self.report or f"{self.name}|{self.signature} = {self.score:.2f}"


def _metrics() -> Any:
    try:
        from sacrebleu import metrics
    except ImportError as exc:  # pragma: no cover  (a dependency of the package)
        raise ImportError("scoring translations needs sacreBLEU: pip install sacrebleu") from exc
    return metrics


def _check(hypotheses: list[str], references: list[str]) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("give lists of sentences, one string per sentence, not one string.")
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references: "
                         "give one reference per hypothesis, in the same order.")
    if not hypotheses:
        raise ValueError("no sentences to score: the hypotheses and references are empty.")
    for side, sentences in (("hypotheses", hypotheses), ("references", references)):
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise TypeError(f"{side}[{i}] is a {type(sentence).__name__}, not a string: "
                                "score detokenized text, not token ids.")


def _score(metric: Any, hypotheses: list[str], references: list[str]) -> Score:
    _check(hypotheses, references)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    signature = str(metric.get_signature())
    return Score(name=result.name, score=float(result.score), signature=signature,
                 report=result.format(signature=signature))


def corpus_bleu(hypotheses: list[str], references: list[str]) -> Score:
    """sacreBLEU's corpus BLEU of detokenized, cased sentences (13a tokenizer, one reference)."""
    return _score(_metrics().BLEU(), hypotheses, references)


def corpus_chrf(hypotheses: list[str], references: list[str]) -> Score:
    """sacreBLEU's corpus chrF (character 6-grams, β = 2) of detokenized sentences."""
    return _score(_metrics().CHRF(), hypotheses, references)


def evaluate_translations(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """BLEU and chrF with their signatures, ready for a JSON log."""
    bleu = corpus_bleu(hypotheses, references)
    chrf = corpus_chrf(hypotheses, references)
    return {"bleu": bleu.score, "chrf": chrf.score, "bleu_signature": bleu.signature,
            "chrf_signature": chrf.signature, "sentences": len(hypotheses)}


def oracle_bleu(n_best: list[list[str]], references: list[str]) -> Score:
    """Corpus BLEU of the hypotheses, one per sentence, that agree best with their reference
    (sacreBLEU's sentence BLEU, with effective order; the better ranked of a tie): the BLEU a
    perfect reranking of the n-best lists would reach. An empty list counts as ""."""
    metric = _metrics().BLEU(effective_order=True)
    picks = [max(hyps or [""], key=lambda h, ref=ref: metric.sentence_score(h, [ref]).score)
             for hyps, ref in zip(n_best, references, strict=True)]
    return corpus_bleu(picks, references)


def score(model: Any, tokenizer: Any, pairs: list[tuple[str, str]], beam: int,
          length_penalty: float = 0.6, output: str | Path | None = None,
          batch_size: int | None = None, n_best: int | None = None,
          graphs: Any = None) -> dict[str, Any]:
    """Translate the sources of ``pairs`` and score them against the targets. With
    ``n_best`` (at most ``beam``), the best hypothesis is scored as without, and the oracle
    BLEU of the ``n_best`` lists is added (``oracle_bleu``). ``graphs`` as for
    ``translate``. ``output``: the translations are written there too, complete or not at
    all (``write_lines``)."""
    hypotheses, lists = translate_sources(model, tokenizer, [s for s, _ in pairs], beam,
                                          length_penalty, batch_size, n_best, graphs)
    if output:
        write_lines(output, hypotheses)
    return score_hypotheses(hypotheses, [t for _, t in pairs], beam, n_best, lists)


def translate_sources(model: Any, tokenizer: Any, sources: list[str], beam: int,
                      length_penalty: float = 0.6, batch_size: int | None = None,
                      n_best: int | None = None, graphs: Any = None
                      ) -> tuple[list[str], list[list[str]] | None]:
    """The translations of ``sources`` (the best hypothesis of each), and with ``n_best``
    each sentence's list of its ``n_best`` best (else None): what ``score_hypotheses`` takes."""
    if n_best is None:
        return translate(model, tokenizer, sources, beam, length_penalty, batch_size,
                         graphs), None
    lists = [[h.text for h in t.hypotheses] for t in translate_n_best(
        model, tokenizer, sources, beam, length_penalty, n_best, batch_size, graphs=graphs)]
    return [texts[0] if texts else "" for texts in lists], lists


def score_hypotheses(hypotheses: list[str], references: list[str], beam: int,
                     n_best: int | None = None,
                     lists: list[list[str]] | None = None) -> dict[str, Any]:
    """BLEU and chrF of ``hypotheses`` (``evaluate_translations``) and the beam; with
    ``n_best`` and each sentence's n-best ``lists``, the oracle BLEU of those."""
    result = evaluate_translations(hypotheses, references)
    result["beam"] = beam
    if n_best is not None:
        result["n_best"] = n_best
        result["oracle_bleu"] = oracle_bleu(lists, references).score
    return result


def score_test_set(checkpoint: Path, pairs: list[tuple[str, str]], beam: int,
                   out: Path) -> dict[str, Any]:
    """After training: greedy and beam translations of the test set, scored and printed."""
    model, tokenizer = load_translator(checkpoint)
    results: dict[str, Any] = {"checkpoint": str(checkpoint)}
    for name, size in (("greedy", 1), (f"beam{beam}", beam)):
        result = score(model, tokenizer, pairs, size, output=out / f"test.{name}.txt")
        results[name] = result
        print(f"test {name}: BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f}  "
              f"({result['bleu_signature']})")
    hypotheses = (out / f"test.beam{beam}.txt").read_text(encoding="utf-8").splitlines()
    for (source, reference), hypothesis in list(zip(pairs, hypotheses, strict=True))[:3]:
        print(f"  source:     {source}\n  reference:  {reference}\n  translated: {hypothesis}")
    return results


__all__ = ["Score", "corpus_bleu", "corpus_chrf", "evaluate_translations", "oracle_bleu",
           "score", "score_test_set"]
