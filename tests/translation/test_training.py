"""Training: exact resumption, stopping on NaN, surviving SIGKILL, the files a run leaves."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from killing import sigkill_when
from train_task import make_task, make_trainer

import minitransformer.translation.training as train_module
from minitransformer import backend
from minitransformer.data.errors import DataError
from minitransformer.nn import Transformer, TransformerConfig
from minitransformer.translation.checkpoint import (
    CheckpointError,
    load_checkpoint,
    restore_model,
    save_checkpoint,
)
from minitransformer.translation.training import TrainConfig, Trainer, TrainingError


def losses(run_dir):
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


def test_a_resumed_run_repeats_the_uninterrupted_losses(tmp_path):
    make_trainer(tmp_path / "whole", max_steps=8).fit()
    make_trainer(tmp_path / "split", max_steps=4).fit()
    resumed = make_trainer(tmp_path / "split", seed=123, max_steps=8)  # other init: overwritten
    resumed.resume()
    resumed.fit()
    whole, split = losses(tmp_path / "whole"), losses(tmp_path / "split")
    assert sorted(whole) == sorted(split) == list(range(1, 9))
    for step in range(1, 9):
        assert split[step] == whole[step], f"step {step}: {split[step]} != {whole[step]}"


def test_resuming_drops_the_log_records_of_steps_after_the_checkpoint(tmp_path):
    """A run killed after its last checkpoint logged steps the resumed run logs again: the
    resumed log must hold each step once, as the uninterrupted run's does."""
    make_trainer(tmp_path / "whole", max_steps=8).fit()
    make_trainer(tmp_path / "split", max_steps=5, eval_every=4).fit()  # checkpoint at step 4
    log = tmp_path / "split" / "log.jsonl"
    log.write_text(log.read_text() + '{"step": 6, "lo')   # the half line of a killed write
    resumed = make_trainer(tmp_path / "split", max_steps=8, eval_every=4)
    resumed.resume(tmp_path / "split" / "checkpoints" / "step-0000004.npz")
    steps = [json.loads(line).get("step") for line in log.read_text().splitlines()]
    assert steps == [1, 2, 3, 4, None]                    # None: the validation at step 4
    resumed.fit()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 9))
    assert losses(tmp_path / "split") == losses(tmp_path / "whole")


def test_a_run_leaves_best_last_averaged_and_the_last_step_checkpoints(tmp_path):
    summary = make_trainer(tmp_path, max_steps=8, keep_last=2).fit()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["averaged.npz", "best.npz", "final.npz", "last.npz", "step-0000006.npz",
                     "step-0000008.npz"]
    last = load_checkpoint(tmp_path / "checkpoints" / "last.npz")
    assert last.state["trainer"]["step"] == 8 and last.tokenizer_bytes
    averaged = load_checkpoint(tmp_path / "checkpoints" / "averaged.npz")
    assert averaged.state["averaged_from"][-1].endswith("step-0000008.npz")
    assert summary["valid_loss"] > 0 and summary["valid_ppl"] > 1
    # the final model is the average only if it validates at least as well as the best
    best_loss = last.state["trainer"]["best_valid_loss"]
    assert summary["final"] == ("averaged.npz" if summary["averaged_valid_loss"] <= best_loss
                                else "best.npz")
    validations = [json.loads(line)["validation"]
                   for line in (tmp_path / "log.jsonl").read_text().splitlines()
                   if "validation" in line]
    assert [v["step"] for v in validations] == [2, 4, 6, 8]


def _with_validation_losses(trainer, losses, key="valid_loss"):
    """The trainer, its validation reporting ``losses[step]`` as the loss at each step (a run
    that overfits: its best validations come before its last ones), or as ``key``."""
    validate = trainer.validate

    def scripted():
        result = validate()
        result[key] = losses[trainer.state["step"]]
        return result
    trainer.validate = scripted
    return trainer


OVERFITTING = {2: 5.0, 4: 1.0, 6: 2.0, 8: 4.0, 10: 6.0, 12: 7.0}


def test_keep_best_keeps_and_averages_the_checkpoints_of_lowest_validation_loss(tmp_path):
    """With keep_best, the step checkpoints of the lowest validation losses stay beside the
    last ones and are averaged into averaged-best.npz; the final model is whichever of the two
    averages and the best checkpoint validates best (the averages validated for real)."""
    trainer = _with_validation_losses(
        make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2), OVERFITTING)
    summary = trainer.fit()
    kept = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "checkpoints").glob("step-*"))
    assert kept == [4, 6, 12]                              # the two best, and the last
    averaged_best = load_checkpoint(tmp_path / "checkpoints" / "averaged-best.npz")
    assert [Path(p).name for p in averaged_best.state["averaged_from"]] == \
        ["step-0000004.npz", "step-0000006.npz"]
    averaged = load_checkpoint(tmp_path / "checkpoints" / "averaged.npz")
    assert [Path(p).name for p in averaged.state["averaged_from"]] == ["step-0000012.npz"]
    losses_of = {"averaged.npz": summary["averaged_valid_loss"],
                 "averaged-best.npz": summary["averaged_best_valid_loss"], "best.npz": 1.0}
    assert summary["final"] == min(losses_of, key=losses_of.get)


def test_keep_best_counts_a_step_once_when_a_finished_run_is_resumed(tmp_path):
    """Resuming a finished run (to average again after a stop) validates its last step again:
    it keeps one place among the best, and checkpoints deleted since are forgotten."""
    losses = {**OVERFITTING, 12: 0.5}                      # the last step is the best
    _with_validation_losses(
        make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2), losses).fit()
    resumed = _with_validation_losses(
        make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2), losses)
    resumed.resume(tmp_path / "checkpoints" / "last.npz")
    resumed.fit()
    assert [entry[0] for entry in resumed.state["kept_best"]] == [12, 4]
    kept = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "checkpoints").glob("step-*"))
    assert kept == [4, 12]
    (tmp_path / "checkpoints" / "step-0000004.npz").unlink()  # as a later run might have
    again = make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2)
    again.resume(tmp_path / "checkpoints" / "last.npz")
    assert [entry[0] for entry in again.state["kept_best"]] == [12]


def _with_validation_bleus(trainer, bleus):
    """The trainer, its validation reporting ``bleus[step]`` as the BLEU at each step."""
    return _with_validation_losses(trainer, bleus, key="valid_bleu")


# the BLEU is highest at steps 8 and 10, where the loss (OVERFITTING) is lowest at 4 and 6
BLEUS = {2: 1.0, 4: 3.0, 6: 2.0, 8: 9.0, 10: 8.0, 12: 0.5}


def _scripted_bleu_run(tmp_path, averages_bleu):
    """A select_by="bleu" run of 12 steps with the scripted validations above, keep_best=2,
    keep_last=1, its averages validating at ``averages_bleu`` (a list, used in order)."""
    trainer = _with_validation_bleus(_with_validation_losses(
        make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2, select_by="bleu",
                     bleu_sentences=4), OVERFITTING), BLEUS)
    real_bleu, scripted = trainer._valid_bleu, iter(averages_bleu)
    trainer._valid_bleu = lambda: (real_bleu(), next(scripted))[1]  # still translated
    return trainer, trainer.fit()


def test_select_by_bleu_keeps_and_averages_the_checkpoints_of_highest_validation_bleu(tmp_path):
    """select_by="bleu": best.npz is the validation of highest BLEU (not the lowest loss), the
    kept checkpoints are those of highest BLEU, and each average is validated for its BLEU."""
    trainer, summary = _scripted_bleu_run(tmp_path, [5.0, 6.0])
    checkpoints = tmp_path / "checkpoints"
    kept = sorted(int(p.stem.split("-")[1]) for p in checkpoints.glob("step-*"))
    assert kept == [8, 10, 12]                             # the two of highest BLEU, the last
    averaged_best = load_checkpoint(checkpoints / "averaged-best.npz")
    assert [Path(p).name for p in averaged_best.state["averaged_from"]] == \
        ["step-0000008.npz", "step-0000010.npz"]
    assert load_checkpoint(checkpoints / "best.npz").state["trainer"]["step"] == 8
    assert [entry[0] for entry in trainer.state["kept_best"]] == [8, 10]
    assert trainer.state["best"] == [8, 4.0, 9.0]         # best.npz's own loss and BLEU
    assert trainer.state["best_valid_loss"] == 1.0         # the run's lowest, recorded too
    assert summary["averaged_valid_bleu"] == 5.0 and summary["averaged_best_valid_bleu"] == 6.0
    assert summary["final"] == "best.npz"                  # 9.0 beats both averages


@pytest.mark.parametrize("averages_bleu, final", [
    ([12.0, 10.0], "averaged.npz"),
    ([7.0, 10.0], "averaged-best.npz"),
    ([10.0, 10.0], "averaged.npz"),                        # the first of equals
    ([9.0, 9.0], "averaged.npz"),                          # equal to the best checkpoint too
])
def test_select_by_bleu_makes_the_final_model_the_one_of_highest_validation_bleu(
        tmp_path, averages_bleu, final):
    """The final model is whichever of the last ones' average, the best ones' average and the
    best checkpoint has the highest validation BLEU, whatever their losses."""
    _, summary = _scripted_bleu_run(tmp_path, averages_bleu)
    assert summary["final"] == final
    final_bytes = (tmp_path / "checkpoints" / "final.npz").read_bytes()
    assert final_bytes == (tmp_path / "checkpoints" / final).read_bytes()


def test_select_by_loss_keeps_the_final_model_by_loss_and_validates_no_bleu_for_averages(
        tmp_path):
    """The default: the averages are validated for their loss alone (no translation), the
    BLEU of a validation moves neither best.npz nor the kept ones, and the final model is
    the candidate of lowest loss."""
    trainer = _with_validation_bleus(_with_validation_losses(
        make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2, bleu_sentences=4),
        OVERFITTING), BLEUS)

    def not_translated():
        raise AssertionError("averages translated when selecting by loss")
    trainer._valid_bleu = not_translated
    summary = trainer.fit()
    assert "averaged_valid_bleu" not in summary and "averaged_best_valid_bleu" not in summary
    assert trainer.state["best"] == [4, 1.0, 3.0]
    assert [entry[0] for entry in trainer.state["kept_best"]] == [4, 6]
    losses_of = {"averaged.npz": summary["averaged_valid_loss"],
                 "averaged-best.npz": summary["averaged_best_valid_loss"], "best.npz": 1.0}
    assert summary["final"] == min(losses_of, key=losses_of.get)


def test_a_run_resumed_with_the_other_measure_judges_by_it_from_there_on(tmp_path):
    """A run selecting by loss, resumed selecting by BLEU: each later validation is weighed
    against best.npz's own BLEU (not the highest BLEU seen, whose checkpoint loss selection
    did not keep), and the kept checkpoints are ranked again by BLEU."""
    _with_validation_bleus(_with_validation_losses(
        make_trainer(tmp_path, max_steps=8, keep_last=1, keep_best=2, bleu_sentences=4),
        OVERFITTING), BLEUS).fit()
    resumed = _with_validation_bleus(_with_validation_losses(
        make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2, bleu_sentences=4,
                     select_by="bleu"), OVERFITTING), BLEUS)
    resumed.resume(tmp_path / "checkpoints" / "last.npz")
    assert resumed.state["best"] == [4, 1.0, 3.0]
    resumed.fit()
    assert resumed.state["best"] == [10, 6.0, 8.0]         # 8.0 beats best.npz's 3.0
    best = load_checkpoint(tmp_path / "checkpoints" / "best.npz")
    assert best.state["trainer"]["step"] == 10
    assert [entry[0] for entry in resumed.state["kept_best"]] == [10, 4]
    kept = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "checkpoints").glob("step-*"))
    assert kept == [4, 10, 12]


def test_select_by_bleu_without_validation_text_is_refused(tmp_path):
    tokenizer, data = make_task()
    data.valid_sources, data.valid_references = [], []
    config = TransformerConfig.named("tiny", tokenizer.vocab_size, d_model=16, d_ff=32)
    with pytest.raises(DataError, match="select_by='bleu' picks checkpoints by the BLEU"):
        Trainer(Transformer(config), tokenizer, data,
                TrainConfig(max_steps=2, select_by="bleu"), tmp_path)


def test_a_run_from_before_validation_bleu_was_kept_resumes_with_its_best_checkpoints(tmp_path):
    """Checkpoints written before kept_best recorded the BLEU hold [step, loss] entries and no
    "best": a resumed run reads them as entries without BLEU, and picks its final model."""
    _with_validation_losses(
        make_trainer(tmp_path, max_steps=8, keep_last=1, keep_best=2), OVERFITTING).fit()
    last = load_checkpoint(tmp_path / "checkpoints" / "last.npz")
    trainer_state = {k: v for k, v in last.state["trainer"].items()
                     if k != "best"}
    trainer_state["kept_best"] = [entry[:2] for entry in trainer_state["kept_best"]]
    loaded = make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2)
    loaded.resume(tmp_path / "checkpoints" / "last.npz")
    old_format = tmp_path / "checkpoints" / "old.npz"
    save_checkpoint(old_format, loaded.model, loaded.optimizer, last.tokenizer_bytes,
                    {**last.state, "trainer": trainer_state})
    resumed = _with_validation_losses(
        make_trainer(tmp_path, max_steps=12, keep_last=1, keep_best=2), OVERFITTING)
    resumed.resume(old_format)
    assert resumed.state["kept_best"] == [[4, 1.0, None], [6, 2.0, None]]
    summary = resumed.fit()
    assert [entry[0] for entry in resumed.state["kept_best"]] == [4, 6]
    assert "best" not in resumed.state                     # no validation beat step 4 since
    assert summary["final"] == "best.npz"  # by the recorded best_valid_loss, 1.0


def test_a_nan_loss_stops_training_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=20)
    original_step = trainer._step

    def poisoned(group):
        if trainer.state["step"] == 4:  # after the checkpoint of step 4, break a weight
            trainer.model.encoder.layers[0].feed_forward.w_1.weight.data[0, 0] = np.nan
        return original_step(group)

    trainer._step = poisoned
    with pytest.raises(TrainingError, match="at step 5 .*last good checkpoint"):
        trainer.fit()
    last = load_checkpoint(tmp_path / "checkpoints" / "last.npz")
    assert last.state["trainer"]["step"] == 4
    assert all(np.isfinite(v).all() for v in last.model_state.values())


def test_an_update_that_breaks_the_weights_is_never_saved(tmp_path):
    """The loss of step 4 is finite, but its update leaves a NaN weight: the checkpoint of
    step 4 must not be written, and last.npz stays the good one of step 2."""
    trainer = make_trainer(tmp_path, max_steps=20)
    original_update = trainer.optimizer.step

    def diverging():
        original_update()
        if trainer.state["step"] == 4:
            trainer.model.encoder.layers[0].feed_forward.w_1.weight.data[0, 0] = np.nan

    trainer.optimizer.step = diverging
    with pytest.raises(TrainingError, match="validation loss became nan at step 4"):
        trainer.fit()
    last = load_checkpoint(tmp_path / "checkpoints" / "last.npz")
    assert last.state["trainer"]["step"] == 2
    assert not (tmp_path / "checkpoints" / "step-0000004.npz").exists()
    assert all(np.isfinite(v).all() for v in last.model_state.values())


def test_an_infinite_gradient_with_a_finite_loss_is_never_applied(tmp_path, monkeypatch):
    """A backward can overflow while its loss stays finite: the step must stop before Adam
    turns the inf into NaN weights, naming the step, with the weights as they were."""
    trainer = make_trainer(tmp_path, max_steps=20)
    real_clip = train_module.clip_grad_norm

    def overflowing_clip(params, max_norm):
        if trainer.state["step"] == 4:
            trainer.optimizer.params[0].grad[0, 0] = np.inf
        return real_clip(params, max_norm)

    monkeypatch.setattr(train_module, "clip_grad_norm", overflowing_clip)
    with pytest.raises(TrainingError, match="gradient norm became inf at step 5 .*finite loss"):
        trainer.fit()
    last = load_checkpoint(tmp_path / "checkpoints" / "last.npz")
    assert last.state["trainer"]["step"] == trainer.state["step"] == 4
    for name, p in trainer.model.named_parameters():  # the update of step 5 never ran
        np.testing.assert_array_equal(p.numpy(), last.model_state[name], err_msg=name)


def test_resuming_from_a_checkpoint_without_training_state_is_explained(tmp_path):
    make_trainer(tmp_path, max_steps=4).fit()
    checkpoints = tmp_path / "checkpoints"
    with pytest.raises(CheckpointError, match="averaged.npz holds a model but no optimizer"):
        make_trainer(tmp_path, max_steps=8).resume(checkpoints / "averaged.npz")
    with np.load(checkpoints / "last.npz", allow_pickle=False) as archive:  # moments lost
        arrays = {n: archive[n] for n in archive.files if n != "optimizer/v.3"}
    np.savez(tmp_path / "damaged.npz", **arrays)
    with pytest.raises(CheckpointError, match="damaged.npz is damaged: its array optimizer/v.3 "
                                              "is missing, though its checksum is listed"):
        make_trainer(tmp_path, max_steps=8).resume(tmp_path / "damaged.npz")
    # a checkpoint written before checksums were, with nothing to tell the loss but Adam
    meta = json.loads(arrays["meta.json"].tobytes())
    del meta["checksums"]
    arrays["meta.json"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(tmp_path / "old.npz", **arrays)
    with pytest.raises(CheckpointError, match="old.npz has an incomplete optimizer state"):
        make_trainer(tmp_path, max_steps=8).resume(tmp_path / "old.npz")


def test_resuming_refuses_a_non_finite_optimizer_state(tmp_path):
    """Finite weights with a NaN in Adam's moments (a written file is checksummed, so a
    damaged one is refused sooner): the first update would make every weight it touches NaN."""
    make_trainer(tmp_path, max_steps=2).fit()
    trainer = make_trainer(tmp_path, max_steps=4)
    trainer.resume()
    trainer.optimizer.v[5][0] = np.inf
    last = load_checkpoint(tmp_path / "checkpoints" / "last.npz")
    save_checkpoint(tmp_path / "broken.npz", trainer.model, trainer.optimizer,
                    last.tokenizer_bytes, last.state)
    with pytest.raises(CheckpointError, match=re.escape(
            "broken.npz holds a non-finite optimizer state (NaN or infinity), first in Adam's "
            "v.5, so training cannot go on from it; resume from an earlier step-*.npz")):
        make_trainer(tmp_path, max_steps=4).resume(tmp_path / "broken.npz")


def test_resuming_with_another_model_configuration_names_what_differs(tmp_path):
    """The error once said only "resume with the same --config and vocabulary", also when
    --config and vocabulary were the same and --dropout was not."""
    trainer = make_trainer(tmp_path, max_steps=4)
    other = Transformer(trainer.model.config.replace(p_dropout=0.3, pre_norm=True))
    save_checkpoint(tmp_path / "other.npz", other)
    with pytest.raises(ValueError, match=re.escape(
            "differs from this run's (p_dropout 0.3 in the checkpoint, 0.1 now; pre_norm True "
            "in the checkpoint, False now); resume with the same --config, --dropout")):
        trainer.resume(tmp_path / "other.npz")


def test_a_model_too_small_for_the_tokenizers_vocabulary_is_refused_before_training(tmp_path):
    """It failed at the first batch, with an embedding error that did not name the
    tokenizer."""
    tokenizer, data = make_task()
    V = tokenizer.vocab_size
    config = TransformerConfig.named("tiny", V - 10, d_model=16, d_ff=32)
    with pytest.raises(ValueError, match=f"the tokenizer has {V} pieces but the model's "
                                         f"vocabulary only {V - 10}"):
        Trainer(Transformer(config), tokenizer, data, TrainConfig(max_steps=2), tmp_path)


def test_every_batch_of_a_run_gets_its_own_dropout_seed(tmp_path, monkeypatch):
    """With more than 64 batches a step, the seeds of one step ran into the next step's."""
    trainer = make_trainer(tmp_path, max_steps=2, accumulate=70, max_tokens=8,
                           eval_every=100)
    assert len(list(trainer.batcher)) > 70        # two steps, the first of 70 batches
    seeds = []
    real_seed = backend.manual_seed
    monkeypatch.setattr(backend, "manual_seed", lambda s: (seeds.append(s), real_seed(s)))
    for step in range(2):
        batches = list(trainer.batcher)[70 * step: 70 * (step + 1)]
        trainer._step(batches)
    assert len(seeds) == len(list(trainer.batcher)) and len(set(seeds)) == len(seeds)


def test_a_run_removes_what_a_killed_save_left_behind(tmp_path):
    make_trainer(tmp_path, max_steps=2).fit()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / "checkpoints" / f".step-0000003.npz.{dead}.tmp"
    stale.write_bytes(b"PK partial")
    resumed = make_trainer(tmp_path, max_steps=4)
    resumed.resume()
    resumed.fit()
    assert not stale.exists()


def test_gradient_accumulation_averages_over_all_tokens_of_the_group(tmp_path):
    one = make_trainer(tmp_path / "a", max_steps=1)
    two = make_trainer(tmp_path / "b", max_steps=1)
    one.model.eval()  # no dropout: both see the same function
    batches = list(one.batcher)[:2]
    from minitransformer.data.batching import make_batch

    merged = make_batch([one.data.train[i] for b in batches for i in b.indices])
    record_merged = _step_without_dropout(one, [merged])
    record_split = _step_without_dropout(two, batches)
    assert record_split["grad_norm"] == pytest.approx(record_merged["grad_norm"], rel=1e-5)
    assert record_split["loss"] == pytest.approx(record_merged["loss"], rel=1e-5)


def test_a_step_backpropagates_each_batch_with_dout_1_into_the_mean_gradient(tmp_path,
                                                                            monkeypatch):
    """Each batch's loss is its summed token loss over the step's tokens (the normalizer), so
    backward starts from 1: no pass scaling the loss's (N, V) gradient, and none dividing the
    summed gradients. They equal the mean's gradient over the whole group."""
    from minitransformer import functional as F
    from minitransformer.functional.loss import CrossEntropy

    trainer = make_trainer(tmp_path, max_steps=1, clip_norm=None)
    group = list(trainer.batcher)[:3]
    for module in trainer.model.modules():
        if hasattr(module, "p"):
            module.p = 0.0
    params = trainer.optimizer.params
    token_sum = 0.0
    for batch in group:                     # the reference: token sums, then their mean
        logits = trainer.model(batch.src, batch.tgt_in)
        loss = F.cross_entropy(logits, batch.tgt_out, trainer.config.label_smoothing,
                               ignore_index=trainer.model.config.pad_id)
        token_loss = loss * batch.n_tgt_tokens
        token_loss.backward()
        token_sum += token_loss.item()
    n_tokens = sum(b.n_tgt_tokens for b in group)
    expected = [p.grad / n_tokens for p in params]
    douts = []
    backward = CrossEntropy.backward
    monkeypatch.setattr(CrossEntropy, "backward",
                        lambda self, dout: (douts.append(float(dout)), backward(self, dout))[1])
    record = trainer._step(group)
    assert douts == [1.0, 1.0, 1.0]
    for p, g in zip(params, expected, strict=True):
        np.testing.assert_allclose(p.grad, g, rtol=1e-4, atol=1e-7)
    assert record["loss"] == pytest.approx(token_sum / n_tokens, rel=1e-6)


def _step_without_dropout(trainer, group):
    for module in trainer.model.modules():
        if hasattr(module, "p"):
            module.p = 0.0
    return trainer._step(group)


def test_a_training_config_that_never_stops_is_refused():
    with pytest.raises(ValueError, match="training would never stop"):
        TrainConfig()


@pytest.mark.parametrize("setting, message", [
    ({"lr_scale": 0.0}, "lr_scale must be greater than 0"),
    ({"lr_scale": -1.0}, "lr_scale must be greater than 0"),
    ({"clip_norm": 0.0}, "clip_norm must be greater than 0"),
    ({"time_budget": -60.0}, "time_budget must be greater than 0"),
    ({"keep_last": 0}, "keep_last must be at least 1"),
    ({"keep_best": -1}, "keep_best must be 0 or more"),
    ({"max_epochs": 0}, "max_epochs must be at least 1"),
    ({"label_smoothing": 1.5}, "label_smoothing must satisfy"),
    ({"bleu_sentences": -1}, "bleu_sentences must be at least 0"),
    ({"select_by": "accuracy"}, "select_by must be one of 'loss', 'bleu', got 'accuracy'"),
    ({"select_by": "bleu", "bleu_sentences": 0},
     r"bleu_sentences=0 \(--bleu-sentences 0\) turns off"),
])
def test_a_training_config_that_would_train_wrongly_is_refused(setting, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{"max_steps": 10, **setting})


CHILD = textwrap.dedent("""
    import sys, time
    from train_task import make_trainer
    from pathlib import Path
    import numpy as np
    run_dir = Path(sys.argv[1])
    if sys.argv[2] == "save":  # hang inside the 4th save, after part of the file is written
        saves = {"n": 0}
        real_savez = np.savez
        def slow_savez(file, **arrays):
            saves["n"] += 1
            if saves["n"] == 4:
                file.write(b"PK partial")
                (run_dir / "inside-save").touch()
                time.sleep(60)
            return real_savez(file, **arrays)
        np.savez = slow_savez
    make_trainer(run_dir, max_steps=10_000, eval_every=1).fit()
""")


def run_child(tmp_path, mode, ready):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    run_dir = tmp_path / "run"
    # this folder, for train_task, ahead of whatever the environment already puts on the path
    path = [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    child = subprocess.Popen([sys.executable, str(script), str(run_dir), mode], env=env)
    sigkill_when(child, lambda: ready(run_dir), "the training process")
    return run_dir


def _resumes(run_dir):
    last = load_checkpoint(run_dir / "checkpoints" / "last.npz")
    restore_model(last)  # every parameter present and well-shaped
    trainer = make_trainer(run_dir, max_steps=last.state["trainer"]["step"] + 1)
    trainer.resume()
    trainer.fit()
    return last.state["trainer"]["step"]


def test_sigkill_during_training_leaves_a_checkpoint_that_resumes(tmp_path):
    def three_checkpoints(run_dir):
        return len(list((run_dir / "checkpoints").glob("step-*.npz"))) >= 3

    run_dir = run_child(tmp_path, "train", three_checkpoints)
    # The kill may land between writing step-3.npz and pointing last.npz at it: last.npz is
    # then step 2, still whole and resumable.
    assert _resumes(run_dir) >= 2


def test_sigkill_in_the_middle_of_a_save_keeps_the_previous_checkpoint(tmp_path):
    run_dir = run_child(tmp_path, "save", lambda d: (d / "inside-save").exists())
    assert list((run_dir / "checkpoints").glob(".step-0000004.npz.*.tmp"))  # half written
    assert _resumes(run_dir) == 3  # the 4th save never finished; the 3rd is intact
    assert not list((run_dir / "checkpoints").glob(".*.tmp"))  # removed by the resumed run
