"""sacreBLEU scoring: known scores, the signature, and the errors."""

import json

import pytest
import sacrebleu

from minitransformer.translation.scoring import (
    Score,
    corpus_bleu,
    corpus_chrf,
    evaluate_translations,
)

REFS = ["The cat sat on the mat.", "A man is riding a bicycle down the street."]
HYPS = ["The cat sat on a mat.", "A man rides a bike down the street."]


def test_identical_sentences_score_100():
    assert corpus_bleu(REFS, REFS).score == pytest.approx(100.0)
    assert corpus_chrf(REFS, REFS).score == pytest.approx(100.0)


def test_bleu_by_hand():
    # 6 tokens, one wrong word: precisions 5/6, 3/5, 2/4, 1/3; equal lengths, so BP = 1
    score = corpus_bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    by_hand = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert score.score == pytest.approx(by_hand)


def test_agrees_with_sacrebleu():
    assert corpus_bleu(HYPS, REFS).score == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert corpus_chrf(HYPS, REFS).score == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)


def test_cased_and_detokenized():
    lower = [r.lower() for r in REFS]
    assert corpus_bleu(lower, REFS).score < 100.0  # case counts
    assert corpus_bleu(["The cat sat on the mat ."], REFS[:1]).score == pytest.approx(100.0)


def test_signature_and_str():
    bleu = corpus_bleu(HYPS, REFS)
    assert isinstance(bleu, Score) and bleu.name == "BLEU"
    version = f"version:{sacrebleu.__version__}"
    for part in ("nrefs:1", "case:mixed", "tok:13a", "smooth:exp", version):
        assert part in bleu.signature
    assert str(bleu).startswith(f"BLEU|{bleu.signature} = {bleu.score:.2f}")
    chrf = corpus_chrf(HYPS, REFS)
    assert chrf.name.startswith("chrF") and "case:mixed" in chrf.signature
    assert f"{chrf.score:.2f}" in str(chrf)


def test_evaluate_translations_is_json_ready():
    result = evaluate_translations(HYPS, REFS)
    assert json.loads(json.dumps(result)) == result
    assert result["bleu"] == pytest.approx(corpus_bleu(HYPS, REFS).score)
    assert result["chrf"] == pytest.approx(corpus_chrf(HYPS, REFS).score)
    assert "tok:13a" in result["bleu_signature"] and "nc:6" in result["chrf_signature"]


def test_errors():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(HYPS, REFS[:1])
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        corpus_chrf(HYPS[:1], REFS)
    with pytest.raises(ValueError, match="empty"):
        evaluate_translations([], [])
    with pytest.raises(TypeError, match="token ids"):
        corpus_bleu([[5, 6, 7]], ["a b c"])
    with pytest.raises(TypeError, match="lists of sentences"):
        corpus_bleu("the cat", "the cat")
