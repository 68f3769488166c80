"""The translation pipeline: from parallel text to a trained, scored translator.

    corpus      parallel text (the built-in task or a folder of files) to a tokenizer and
                token ids
    training    the training loop: token batches, label smoothing, Adam with warmup,
                validation, checkpoints, resume
    checkpoint  safe checkpoints (atomic, no pickle) and their averaging
    decode      greedy and beam search with the key/value cache, n-best lists; on several
                cores, shares of a batch on worker processes (set_decode_processes)
    alignment   each output token's source token, from the cross-attention
    translator  sentences in, sentences out (or n-best lists with scores and alignments);
                the translator a checkpoint holds
    scoring     sacreBLEU's BLEU and chrF, and translating a test set to score it

Built on the engine (nn, optim, functional) and data/; `minitransformer train`, `translate`,
`evaluate` and `plot attention` are thin commands over it.
"""

from ._processes import get_decode_processes, set_decode_processes
from .checkpoint import (
    Checkpoint,
    CheckpointError,
    average_checkpoints,
    load_checkpoint,
    restore_model,
    save_checkpoint,
)
from .corpus import Corpus, load_corpus, prepare_corpus
from .decode import Hypothesis, beam_search, gnmt_length_penalty, greedy_decode
from .scoring import Score, corpus_bleu, corpus_chrf, evaluate_translations, oracle_bleu, score
from .training import TrainConfig, Trainer, TrainingError, TranslationData
from .translator import (
    Alignment,
    TranslatedHypothesis,
    Translation,
    load_translator,
    translate,
    translate_n_best,
    translation_session,
)

__all__ = [
    "Alignment", "Checkpoint", "CheckpointError", "Corpus", "Hypothesis", "Score",
    "TrainConfig", "TranslatedHypothesis", "Trainer", "TrainingError", "Translation",
    "TranslationData", "average_checkpoints", "beam_search", "corpus_bleu", "corpus_chrf",
    "evaluate_translations", "get_decode_processes", "gnmt_length_penalty", "greedy_decode",
    "load_checkpoint", "load_corpus", "load_translator", "oracle_bleu", "prepare_corpus",
    "restore_model", "save_checkpoint", "score", "set_decode_processes", "translate",
    "translate_n_best", "translation_session",
]
