"""Memory estimated before it is spent: the estimates against what the code really allocates
(tracemalloc counts NumPy's arrays), and, under a limit forced through
MINITRANSFORMER_MEMORY_LIMIT, decoding that lowers its batch and says so, decoding, training
and averaging that refuse with the numbers and the option to change.

No test depends on this machine's memory: every limit is set, and derived from the estimates
themselves, so each lands between two known needs."""

import re
import tracemalloc

import numpy as np
import pytest
from conftest import CUDA
from train_task import make_task

import minitransformer
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.optim import Adam
from minitransformer.translation import memory
from minitransformer.translation.checkpoint import average_checkpoints, save_checkpoint
from minitransformer.translation.decode import beam_search, greedy_decode
from minitransformer.translation.memory import MemoryLimitError
from minitransformer.translation.training import (
    TrainConfig,
    Trainer,
    _shapes,
    check_training_memory,
    training_memory,
)
from minitransformer.translation.translator import translate, translate_n_best

LIMIT = memory.ENVIRONMENT_VARIABLE


@pytest.fixture(autouse=True)
def no_limit(monkeypatch):
    """Every test starts without a limit of its own."""
    monkeypatch.delenv(LIMIT, raising=False)


@pytest.fixture
def one_thread():
    """One worker thread: a batch decoded in one share, as the estimate then assumes, and
    a peak that no interleaving of two threads can move."""
    before = minitransformer.get_num_threads()
    minitransformer.set_num_threads(1)
    yield
    minitransformer.set_num_threads(before)


def peak_bytes(work):
    """The peak of the bytes allocated while ``work()`` runs, beyond those before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def model_of(vocab=300, **sizes):
    minitransformer.manual_seed(0)
    return Transformer(TransformerConfig.named("tiny", vocab, p_dropout=0.0, **sizes))


# ----------------------------------------------------------------------------- the pieces

@pytest.mark.parametrize("text, expected", [
    ("1048576", 2**20), ("200M", 200 * 2**20), ("1.5G", 3 * 2**29), ("64KiB", 64 * 2**10),
    (" 2 gb ", 2 * 2**30), ("1T", 2**40), (".5k", 512),
])
def test_sizes_are_bytes_with_binary_suffixes(text, expected):
    assert memory.parse_size(text) == expected


@pytest.mark.parametrize("text", ["abc", "-1M", "1.5.2G", "12 MB B", "1P"])
def test_a_limit_that_is_no_size_is_refused_naming_the_variable(text):
    with pytest.raises(MemoryLimitError, match=f"{LIMIT} must be a number of bytes.*got"):
        memory.parse_size(text)


def test_the_limit_replaces_what_the_machine_has(monkeypatch):
    free = memory.available_memory("cpu")
    assert free is None or free > 0  # the machine's: MemAvailable, under a cgroup's limit
    monkeypatch.setenv(LIMIT, "300M")
    assert memory.available_memory("cpu") == 300 * 2**20
    assert memory.describe_available() == f"{LIMIT}=300M"


def test_a_containers_cgroup_limit_leaves_its_room(tmp_path):
    (tmp_path / "memory.max").write_text("1073741824\n")       # cgroup v2: 1 GiB
    (tmp_path / "memory.current").write_text("629145600\n")    # 600 MiB used,
    (tmp_path / "memory.stat").write_text("anon 1\ninactive_file 104857600\n")  # 100 cache
    assert memory._cgroup_room(tmp_path) == 2**30 - 500 * 2**20
    (tmp_path / "memory.max").write_text("max\n")
    assert memory._cgroup_room(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text(str(2**31))
    (v1 / "memory" / "memory.usage_in_bytes").write_text(str(2**30))
    (v1 / "memory" / "memory.stat").write_text("total_inactive_file 0\n")
    assert memory._cgroup_room(v1) == 2**30
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712")  # none
    assert memory._cgroup_room(v1) is None


def test_on_the_gpu_the_devices_free_memory_and_the_pools_free_blocks_count(monkeypatch):
    class Runtime:
        @staticmethod
        def memGetInfo():  # noqa: N802 (CuPy's name)
            return 3 * 2**30, 80 * 2**30

    class Pool:
        @staticmethod
        def free_bytes():
            return 2**29

    class CuPy:
        cuda = type("cuda", (), {"runtime": Runtime})
        get_default_memory_pool = staticmethod(lambda: Pool)

    monkeypatch.setattr(memory.backend, "get_backend",
                        lambda name: type("Backend", (), {"xp": CuPy})())
    assert memory.available_memory("cuda") == 3 * 2**30 + 2**29
    assert memory.describe_available("cuda") == "free on the GPU"


@pytest.mark.skipif(not CUDA, reason="needs CuPy and a GPU")
def test_a_real_gpu_reports_its_free_memory():
    free = memory.available_memory("cuda")
    assert 0 < free <= memory.backend.get_backend("cuda").xp.cuda.runtime.memGetInfo()[1] \
        + memory.backend.get_backend("cuda").xp.get_default_memory_pool().total_bytes()


@pytest.mark.parametrize("sizes", [
    {}, {"share_embeddings": False, "src_vocab_size": 70}, {"tie_output": False},
    {"learned_positions": True, "max_len": 64}, {"pre_norm": True}, {"n_layers": 3},
])
def test_the_parameters_are_counted_from_the_configuration(sizes):
    model = model_of(90, **sizes)
    assert memory.parameter_count(model.config) == model.num_parameters()


def test_byte_counts_read_as_three_significant_digits():
    assert memory.format_bytes(512) == "512 bytes"
    assert memory.format_bytes(1536) == "1.5 KiB"
    assert memory.format_bytes(380 * 2**20) == "380 MiB"
    assert memory.format_bytes(1.234 * 2**30) == "1.23 GiB"


# ----------------------------------------------------------------------------- estimates

@pytest.mark.parametrize("beam", [1, 4])
def test_decoding_estimate_is_an_upper_bound_close_to_the_real_peak(one_thread, beam):
    model = model_of(300)
    src = np.random.default_rng(0).integers(4, 300, size=(48, 20))
    # an end-of-sentence id the model never emits: every sentence runs to its limit
    search = ((lambda: greedy_decode(model, src, 2, -1)) if beam == 1 else
              (lambda: beam_search(model, src, 2, -1, beam)))
    search()  # the positional tables, made once, are then part of the model
    measured = peak_bytes(search)
    estimate = memory.decoding_bytes(model.config, 48, 20, 70, beam)
    assert measured <= estimate <= 1.3 * measured


def test_alignment_estimate_covers_the_teacher_forced_pass(one_thread):
    from minitransformer.translation.alignment import cross_attention

    model = model_of(300)
    rng = np.random.default_rng(0)
    sources, outputs = rng.integers(4, 300, (64, 20)).tolist(), rng.integers(4, 300, (64, 70))
    measured = peak_bytes(lambda: cross_attention(model, sources, outputs.tolist(), 2))
    # one sentence's search is far smaller than aligning 64 hypotheses: the pass decides
    estimate = memory.decoding_bytes(model.config, 1, 20, 70, 1, alignments=64)
    assert measured <= estimate <= 1.3 * measured


def test_training_step_estimate_is_an_upper_bound_close_to_the_real_peak(one_thread):
    from minitransformer import functional as F

    model = model_of(300)
    model.train()
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(4, 300, (40, 18)), rng.integers(4, 300, (40, 21))

    def step():
        optimizer = Adam(model.parameters(), lr=1e-4)
        logits = model(src, tgt)            # held through the backward, as the trainer does
        loss = F.cross_entropy(logits, tgt, 0.1, ignore_index=0, normalizer=1600)
        loss.backward()                     # the trainer's: a share of a step's tokens
        optimizer.step()

    measured = peak_bytes(step)
    peak = memory.training_peak(model.config, [(40, 18, 21)])
    params = memory.parameter_count(model.config) * 4  # there before the step
    estimate = peak.state + peak.step - params
    assert measured <= estimate <= 1.3 * measured


def test_averaging_estimate_is_an_upper_bound_and_the_mean_is_numpys(tmp_path):
    paths = []
    for seed in range(3):
        model = model_of(2000, d_model=128, d_ff=512)
        minitransformer.manual_seed(seed)
        for p in model.parameters():
            p.data += np.random.default_rng(seed).standard_normal(p.shape).astype(np.float32)
        paths.append(save_checkpoint(tmp_path / f"s{seed}.npz", model,
                                     Adam(model.parameters())))
    averaged = average_checkpoints(paths)  # the zip reader's first use, out of the count
    measured = peak_bytes(lambda: average_checkpoints(paths))
    assert measured <= memory.averaging_bytes(paths) <= 1.5 * measured
    from minitransformer.translation.checkpoint import load_checkpoint
    states = [load_checkpoint(p).model_state for p in paths]
    for name, value in averaged.model_state.items():
        expected = np.mean([s[name] for s in states], axis=0, dtype=np.float64)
        np.testing.assert_array_equal(value, expected.astype(np.float32))


# ----------------------------------------------------------------------------- decoding

def sentences_and_translator():
    tokenizer, data = make_task()
    minitransformer.manual_seed(0)
    config = TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16, d_ff=32)
    return data.valid_sources * 2, Transformer(config), tokenizer


def needs(model, tokenizer, sentences, beam, aligned=0):
    """decoding_bytes of b sentences as the translator sees its batch of longest ones."""
    longest = max(len(tokenizer.encode(s)) for s in sentences)
    return lambda b: memory.decoding_bytes(model.config, b, longest, longest + 50, beam,
                                           b * aligned)


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_lowers_its_batch_to_fit_and_says_so_once(monkeypatch, capsys, beam):
    sentences, model, tokenizer = sentences_and_translator()
    expected = translate(model, tokenizer, sentences, beam, batch_size=16)
    assert capsys.readouterr().err == ""
    need = needs(model, tokenizer, sentences, beam)
    # between two sizes whose needs differ (a small batch may need no more than the first
    # use's positional tables): the largest that fits is the size below
    fitting = next(b for b in range(4, 16) if need(b) < need(b + 1))
    monkeypatch.setenv(LIMIT, str((need(fitting) + need(fitting + 1)) // 2))
    assert translate(model, tokenizer, sentences, beam, batch_size=16) == expected
    err = capsys.readouterr().err
    search = "greedily" if beam == 1 else f"with beam {beam}"
    assert err.count("\n") == 1
    assert re.fullmatch(rf"warning: decoding 16 sentences at a time {search} would need about "
                        rf"{re.escape(memory.format_bytes(need(16)))} of memory, more than the "
                        rf"\S+ \S+ available \({LIMIT}=\d+\), so they are decoded {fitting} "
                        r"at a time \(--batch-size sets it\)\.\n", err)


def test_alignments_count_in_the_batch_that_fits(monkeypatch, capsys):
    sentences, model, tokenizer = sentences_and_translator()
    sentences = sentences[:10]
    plain, aligned = needs(model, tokenizer, sentences, 2), needs(model, tokenizer, sentences,
                                                                  2, aligned=2)
    assert aligned(8) > plain(8)
    monkeypatch.setenv(LIMIT, str(plain(8)))
    translate_n_best(model, tokenizer, sentences, 2, n_best=2, batch_size=8)
    assert capsys.readouterr().err == ""  # 8 fit without alignments
    found = translate_n_best(model, tokenizer, sentences, 2, n_best=2, batch_size=8,
                             alignment_layer=-1)
    assert "and aligning their hypotheses" in capsys.readouterr().err
    assert all(h.alignment is not None for t in found for h in t.hypotheses)


def test_a_sentence_that_does_not_fit_alone_is_refused_with_the_beam_that_would(monkeypatch):
    sentences, model, tokenizer = sentences_and_translator()
    one = lambda beam: needs(model, tokenizer, sentences, beam)(1)  # noqa: E731
    widest = next(k for k in range(2, 30) if one(k) < one(k + 1))
    monkeypatch.setenv(LIMIT, str((one(widest) + one(widest + 1)) // 2))
    with pytest.raises(MemoryLimitError) as refused:
        translate(model, tokenizer, sentences, 30)
    message = str(refused.value)
    assert message.startswith("decoding a sentence of ")
    assert f"with beam 30 needs about {memory.format_bytes(one(30))} of memory, more than" \
        in message
    assert message.endswith(f"; give a beam of {widest} or less (--beam {widest}).")
    assert not re.search(r"\.\s+[A-Z]", message)  # one sentence
    monkeypatch.setenv(LIMIT, str(one(widest)))
    longest = max(sentences, key=lambda s: len(tokenizer.encode(s)))
    translate(model, tokenizer, [longest], widest)  # which fits


def test_greedy_decoding_that_does_not_fit_asks_for_memory(monkeypatch):
    sentences, model, tokenizer = sentences_and_translator()
    monkeypatch.setenv(LIMIT, str(needs(model, tokenizer, sentences, 1)(1) - 1))
    with pytest.raises(MemoryLimitError, match=rf"greedily needs about .*; raise {LIMIT}, or "
                                               r"free some memory\.$"):
        translate(model, tokenizer, sentences, 1)


def test_a_beam_wider_than_the_vocabulary_is_refused_by_translate_not_by_the_search():
    sentences, model, tokenizer = sentences_and_translator()
    V = model.config.tgt_vocab_size
    for call in (lambda: translate(model, tokenizer, sentences, V + 1),
                 lambda: translate_n_best(model, tokenizer, [], V + 1)):
        with pytest.raises(ValueError, match=f"a beam of {V + 1} is wider than the model's "
                                             f"target vocabulary of {V} pieces.*at most {V}"):
            call()
    # the search itself takes it: exhaustive search, compared with brute force elsewhere
    assert len(beam_search(model, [[5, 6]], 2, 3, beam_size=V + 1, max_len=2)) == 1


# ----------------------------------------------------------------------------- training

def training_setup(**settings):
    tokenizer, data = make_task()
    config = TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16, d_ff=32)
    settings = {"max_tokens": 120, "max_steps": 2, "bleu_sentences": 4, "progress": False,
                **settings}
    return tokenizer, data, config, TrainConfig(**settings)


def test_training_refuses_with_the_max_tokens_that_would_fit(monkeypatch, tmp_path):
    tokenizer, data, config, train_config = training_setup(bleu_sentences=0)
    size = len(tokenizer.to_bytes())
    fits = memory.training_peak(config, _shapes(data.train, 60), 4, size,
                                _shapes(data.valid, 60))
    monkeypatch.setenv(LIMIT, str(fits.state + max(fits.step, fits.host)))
    with pytest.raises(MemoryLimitError) as refused:
        check_training_memory(config, train_config, data, size)
    message = str(refused.value)
    assert message.startswith(f"training a model of {memory.parameter_count(config):,} "
                              "parameters on batches of 120 tokens needs about ")
    wanted = re.search(r"give --max-tokens (\d+) \(with --accumulate (\d+) for about "
                       r"as many tokens a step\), or a smaller --config\.$", message)
    assert wanted, message
    best = int(wanted[1])
    assert 60 <= best < 120 and int(wanted[2]) == -(-120 // best)
    for max_tokens, refused in ((best, False), (best + 1, True)):  # fits, the next not
        settings = TrainConfig(max_tokens=max_tokens, max_steps=2, bleu_sentences=0)
        if refused:
            with pytest.raises(MemoryLimitError):
                check_training_memory(config, settings, data, size)
        else:
            check_training_memory(config, settings, data, size)
    # the Trainer checks too, before Adam's moments exist: the built model counts as held
    minitransformer.manual_seed(0)
    with pytest.raises(MemoryLimitError, match="give --max-tokens"):
        Trainer(Transformer(config), tokenizer, data, train_config, tmp_path / "run")


def test_training_that_no_batch_makes_fit_asks_for_a_smaller_model(monkeypatch):
    tokenizer, data, config, train_config = training_setup()
    monkeypatch.setenv(LIMIT, "200K")
    with pytest.raises(MemoryLimitError, match=r"more than the 200 KiB available \("
                                               rf"{LIMIT}=200K\); even batches of one sentence "
                                               r"pair would not fit, so choose a smaller "
                                               r"--config"):
        check_training_memory(config, train_config, data)


def test_the_final_beam_counts_in_the_training_check(monkeypatch):
    tokenizer, data, config, train_config = training_setup(bleu_sentences=0)
    peak = memory.training_peak(config, _shapes(data.train, 120), 4, 0,
                                _shapes(data.valid, 120))
    monkeypatch.setenv(LIMIT, str(peak.state + max(peak.step, peak.host)))
    check_training_memory(config, train_config, data)
    with pytest.raises(MemoryLimitError):  # translating a long test sentence with beam 30
        check_training_memory(config, train_config, data, final_beam=30,
                              final_source_len=200)


def test_averaging_refuses_before_reading_and_training_says_its_checkpoints_are_kept(
        monkeypatch, tmp_path):
    from train_task import make_trainer

    trainer = make_trainer(tmp_path / "run", max_steps=2, keep_last=2)
    monkeypatch.setenv(LIMIT, "64K")  # after the Trainer's own check
    with pytest.raises(MemoryLimitError) as refused:
        trainer.fit()
    message = str(refused.value)
    checkpoints = tmp_path / "run" / "checkpoints"
    assert message.startswith(f"training is done and its checkpoints are intact in "
                              f"{checkpoints}, but averaging 1 checkpoint needs about ")
    assert message.endswith("(they are read one at a time, so averaging fewer would not "
                            "help), then continue with --resume to average them.")
    assert (checkpoints / "last.npz").is_file() and not (checkpoints / "averaged.npz").exists()
    paths = sorted(checkpoints.glob("step-*.npz"))
    with pytest.raises(MemoryLimitError, match=r"^averaging 1 checkpoint needs about "):
        average_checkpoints(paths)
    monkeypatch.setenv(LIMIT, str(memory.averaging_bytes(paths)))
    assert average_checkpoints(paths).config == trainer.model.config


def test_selecting_by_bleu_counts_the_averages_translated_beside_the_trained_weights():
    """With select_by="bleu" each average is translated at the end while the trained weights
    and the average's arrays are held: the estimate grows by those 2·P bytes where that
    decoding is the peak (small batches of a small model)."""
    tokenizer, data, config, _ = training_setup()
    by = {select_by: training_memory(config, TrainConfig(max_tokens=20, max_steps=2,
                                                         bleu_sentences=4,
                                                         select_by=select_by), data)[0]
          for select_by in ("loss", "bleu")}
    assert by["bleu"] - by["loss"] == 2 * memory.parameter_count(config) * 4
