"""``--lr-schedule``: the learning rates of every epoch, for every parameter group, and a
resumed run continuing the schedule exactly."""

import json
import math

import pytest
import torch

from gnn_treelstm.training.config import RunConfig
from gnn_treelstm.training.resume import STATE_NAME, TrainState
from gnn_treelstm.training.schedule import build_scheduler, lr_factor
from gnn_treelstm.training.trainer import TrainHooks
from tests.training.helpers import Interrupt, ScriptedDev, stop_after, tiny_config

LR, EMB_LR = 0.05, 0.1  # AdaGrad's defaults (Tai §5.3)


class GroupLrs(ScriptedDev):
    """Records every parameter group's learning rate during each epoch."""

    scores = [0.5, 0.4, 0.3, 0.6, 0.5, 0.4, 0.3]

    def train_epoch(self, epoch):
        self.lrs = getattr(self, "lrs", [])
        self.lrs.append([g["lr"] for g in self.optimizer.param_groups])
        return super().train_epoch(epoch)


def _lrs(run_dir):
    return [json.loads(x)["lr"] for x in (run_dir / "metrics.jsonl").read_text().split("\n")
            if x]


@pytest.mark.parametrize("options,factors", [
    ({}, [1, 1, 1, 1]),
    ({"lr_warmup_epochs": 2}, [1 / 3, 2 / 3, 1, 1]),
    ({"lr_schedule": "cosine"}, [1, (1 + math.cos(math.pi / 4)) / 2, 0.5,
                                 (1 + math.cos(3 * math.pi / 4)) / 2]),
    ({"lr_schedule": "cosine", "lr_warmup_epochs": 1}, [0.5, 1, 0.75, 0.25]),
    ({"lr_schedule": "step", "lr_step_size": 2, "lr_gamma": 0.5}, [1, 1, 0.5, 0.5]),
    ({"lr_schedule": "step", "lr_step_size": 1, "lr_gamma": 0.1, "lr_warmup_epochs": 1},
     [0.5, 1, 0.1, 0.01]),
])
def test_learning_rates_per_epoch(tiny_sst, tmp_path, options, factors):
    trainer = GroupLrs(tiny_config(tiny_sst, tmp_path, epochs=4, **options))
    trainer.fit()
    want = [[LR * f, EMB_LR * f] for f in factors]  # every group by the same factor
    assert trainer.lrs == [pytest.approx(w, rel=1e-12) for w in want]
    assert _lrs(tmp_path / "r") == pytest.approx([w[0] for w in want], rel=1e-12)
    assert [lr_factor(trainer.cfg, e) for e in (1, 2, 3, 4)] == pytest.approx(factors)


def test_the_default_has_no_scheduler(tiny_sst, tmp_path):
    """The papers' loop: no scheduler object, nothing saved for it."""
    trainer = GroupLrs(tiny_config(tiny_sst, tmp_path, epochs=2))
    with pytest.raises(Interrupt):
        trainer.hooks = TrainHooks(on_epoch_end=stop_after(1))
        trainer.fit()
    assert trainer.scheduler is None
    assert TrainState.load(tmp_path / "r").scheduler is None


def test_plateau_follows_the_dev_score(tiny_sst, tmp_path):
    """Scores 0.5, 0.4, 0.3, 0.6, 0.5, 0.4, 0.3 with patience 1: the second epoch in a row
    without a better score halves the rates for the next epoch (after epochs 3 and 6)."""
    trainer = GroupLrs(tiny_config(tiny_sst, tmp_path, epochs=7, lr_schedule="plateau",
                                   lr_gamma=0.5, lr_plateau_patience=1))
    trainer.fit()
    assert [lrs[0] for lrs in trainer.lrs] == pytest.approx(
        [LR, LR, LR, LR / 2, LR / 2, LR / 2, LR / 4])
    assert [lrs[1] for lrs in trainer.lrs][-1] == pytest.approx(EMB_LR / 4)


def test_plateau_on_a_score_to_minimize():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    cfg = RunConfig(lr_schedule="plateau", lr_gamma=0.5, lr_plateau_patience=0)
    sched = build_scheduler(opt, cfg, lower_is_better=True)
    sched.step(1.0)
    sched.step(0.5)   # better (lower): kept
    assert opt.param_groups[0]["lr"] == 1.0
    sched.step(0.7)   # worse: decays at once with patience 0
    assert opt.param_groups[0]["lr"] == 0.5


@pytest.mark.parametrize("options,stop_at", [
    ({"lr_schedule": "cosine", "lr_warmup_epochs": 1}, 2),
    ({"lr_schedule": "step", "lr_step_size": 2, "lr_gamma": 0.3}, 3),
    # interrupted with one epoch without a better score counted: the decay comes on time
    ({"lr_schedule": "plateau", "lr_gamma": 0.5, "lr_plateau_patience": 1}, 2),
])
def test_resume_continues_the_schedule_exactly(tiny_sst, tmp_path, options, stop_at):
    """A run interrupted after an epoch and resumed has the learning rates, losses and
    dev scores of one that never stopped."""
    cfg = tiny_config(tiny_sst, tmp_path, epochs=6, **options)
    ref = GroupLrs(cfg)
    ref.fit()
    stopped = tiny_config(tiny_sst, tmp_path, name="s", epochs=6, **options)
    with pytest.raises(Interrupt):
        GroupLrs(stopped, hooks=TrainHooks(on_epoch_end=stop_after(stop_at))).fit()
    assert TrainState.load(tmp_path / "s").scheduler is not None
    resumed = GroupLrs(stopped)
    resumed.fit(resume=True)
    assert resumed.lrs == ref.lrs[stop_at:]  # exactly: the same floats

    def records(name):
        return [(r["epoch"], r["lr"], r["train_loss"]) for r in map(
            json.loads, (tmp_path / name / "metrics.jsonl").read_text().split("\n")[:-1])]

    assert records("s") == records("r")
    assert not (tmp_path / "s" / STATE_NAME).exists()


def test_resume_refuses_a_state_of_another_schedule(tiny_sst, tmp_path):
    """A state saved without a scheduler cannot continue a run that has one (and the
    reverse); the message says how to restart the seed."""
    from gnn_treelstm.training.resume import restore_training

    cfg = tiny_config(tiny_sst, tmp_path, epochs=3)
    with pytest.raises(Interrupt):
        GroupLrs(cfg, hooks=TrainHooks(on_epoch_end=stop_after(1))).fit()
    state = TrainState.load(tmp_path / "r")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = build_scheduler(opt, RunConfig(lr_schedule="cosine"))
    with pytest.raises(ValueError, match="disagree on a learning-rate scheduler.*remove "
                                         "state.pt"):
        restore_training(state, model, opt, torch.Generator(), sched)


@pytest.mark.parametrize("options,message", [
    ({"lr_schedule": "linear"}, "unknown learning-rate schedule 'linear'"),
    ({"lr_gamma": 0.0}, "--lr-gamma 0.0: a decay factor must be in"),
    ({"lr_gamma": 1.5}, "--lr-gamma 1.5: a decay factor must be in"),
    ({"lr_step_size": 0}, "--lr-step-size 0: must be >= 1"),
    ({"lr_warmup_epochs": -1}, "--lr-warmup-epochs -1: must be >= 0"),
    ({"lr_plateau_patience": -1}, "--lr-plateau-patience -1: must be >= 0"),
    ({"lr_warmup_epochs": 10}, "--lr-warmup-epochs 10: must be fewer than --epochs 10"),
    ({"lr_schedule": "plateau", "lr_warmup_epochs": 1}, "takes no warm-up"),
])
def test_bad_schedules_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**options).check()
