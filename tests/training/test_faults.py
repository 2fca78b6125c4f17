"""Numerical faults and bad numeric options: a clear message and exit code 2, never a
traceback, and the last good checkpoint left intact."""

import json

import pytest
import torch

from gnn_treelstm.commands import train
from gnn_treelstm.training.faults import FiniteChecks, nonfinite

TINY = ["--embeddings-mode", "random", "--emb-dim", "6", "--hidden", "5", "-q"]


@pytest.mark.parametrize("flags,message", [
    (["--lr", "-1"], "--lr -1.0: a learning rate must be in (0, 10]"),
    (["--lr", "1e6"], "--lr 1000000.0: a learning rate must be in (0, 10]"),
    (["--lr", "nan"], "--lr nan: a learning rate must be in"),
    (["--emb-lr", "0"], "--emb-lr 0.0: a learning rate must be in"),
    (["--l2", "-0.1"], "--l2 -0.1: must be a finite number >= 0"),
    (["--dropout", "1.5"], "--dropout 1.5: must be in [0, 1)"),
    (["--max-eval", "0"], "--max-eval 0: must be a positive integer"),
    (["--max-train", "-3"], "--max-train -3: must be a positive integer"),
    (["--epochs", "0"], "argument --epochs: expected a positive integer, got 0"),
    (["--seed", "99999999999999999999999"], "--seed 99999999999999999999999: a seed must be "
     "an integer from 0 to 9223372036854775807 (2**63 - 1); e.g. --seed 1"),
    (["--seed", "-1"], "--seed -1: a seed must be an integer from 0 to"),
    (["--seed", str(2**63 - 2), "--seeds", "3"], "(with --seeds 3, up to "
     "9223372036854775805)"),
    (["--hidden", "100000000"], "--hidden 100000000: the model would need about "),
    (["--emb-dim", "1000000"], "--emb-dim 1000000: at most 65536"),
    (["--epochs", "100000000000000000000000"], "--epochs 100000000000000000000000: at most "
     "100,000"),
    (["--seeds", "99999999999999999999999"], "--seeds 99999999999999999999999: at most 1,000"),
    (["--workers", "99999999999999999999999"], "--workers 99999999999999999999999: more "
     "loader processes than the"),
])
def test_bad_numbers_are_refused_up_front(tiny_sst, tmp_path, capsys, flags, message):
    try:
        rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(tmp_path), *TINY, *flags])
    except SystemExit as exc:  # argparse's own refusals (a flag's type)
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_model_larger_than_the_machine_is_refused_with_the_estimate(
        tiny_sst, tmp_path, capsys, monkeypatch):
    """--hidden 20000 (4.0 billion weights) on a machine of 16 GiB: refused before anything
    is allocated or written, naming the estimate and the machine's memory."""
    from gnn_treelstm.training import config

    monkeypatch.setattr(config, "machine_memory", lambda device="cpu": (16 * 2**30,
                                                                        "this machine"))
    rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(tmp_path), *TINY,
                     "--hidden", "20000"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert ("--hidden 20000: the model would need about 54.5 GiB to train (4,000,660,011 "
            "weights besides the word vectors" in err), err
    assert "and this machine has 16.0 GiB; lower --hidden" in err
    assert not list(tmp_path.iterdir())


def _poison_after(calls: int, monkeypatch):
    """Make the task loss NaN from the ``calls``-th training step on."""
    from gnn_treelstm.tasks.classification import ClassificationTask

    real = ClassificationTask.loss
    seen = {"n": 0}

    def loss(self, out, batch):
        value = real(self, out, batch)
        seen["n"] += 1
        return value * float("nan") if seen["n"] >= calls else value

    monkeypatch.setattr(ClassificationTask, "loss", loss)


def test_a_nan_loss_stops_the_run_with_the_batch_and_keeps_the_last_checkpoint(
        tiny_sst, tmp_path, capsys, monkeypatch):
    # the tiny SST train split has 16 sentences: 4 steps of 4 per epoch
    _poison_after(4 + 2, monkeypatch)  # epoch 1 is clean, epoch 2 step 2 is not
    rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "r",
                     "--epochs", "3", "--batch-size", "4", *TINY])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "the training loss is nan at epoch 2, step 2 (training examples " in err
    assert "holds the last good checkpoint (epoch 1)" in err and "--skip-nonfinite" in err
    ck = torch.load(tmp_path / "r" / "best.pt", weights_only=True)
    assert ck["meta"]["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in ck["state_dict"].values())


def test_skip_nonfinite_skips_and_counts(tiny_sst, tmp_path, monkeypatch):
    _poison_after(3, monkeypatch)
    assert train.main(["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "r",
                       "--epochs", "1", "--batch-size", "4", "--skip-nonfinite", *TINY]) == 0
    rec = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])
    assert rec["skipped_nonfinite"] >= 1


def test_nonfinite_gradients_are_caught_too():
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.tensor([1.0, float("inf"), 0.0])
    assert nonfinite(torch.tensor(1.0), [p]) == "a gradient is NaN or infinite"
    p.grad = torch.zeros(3)
    assert nonfinite(torch.tensor(1.0), [p]) == ""
    assert "loss is inf" in nonfinite(torch.tensor(float("inf")), [p])


class _Event:
    """A copy's event that arrives when ``arrived`` says so (or is waited for)."""

    def __init__(self, arrived):
        self.arrived, self.waited = arrived, False

    def query(self):
        return self.waited or self.arrived()

    def synchronize(self):
        self.waited = True


def test_finite_checks_read_the_arrived_ones_in_order_and_drop_none(monkeypatch):
    """A check whose copy has not arrived stays queued (and the ones behind it); each
    fault names its own step; waiting reads them all."""
    arrived = {"n": 0}
    made = []

    def copied(device):
        index = len(made)
        made.append(_Event(lambda: index < arrived["n"]))
        return made[-1]

    monkeypatch.setattr(FiniteChecks, "_copied", staticmethod(copied))
    p = torch.nn.Parameter(torch.ones(2))
    checks = FiniteChecks()
    p.grad = torch.ones(2)
    checks.add(torch.tensor(float("nan")), [p], "step 1")
    checks.add(torch.tensor(1.0), [p], "step 2")
    p.grad = torch.tensor([float("inf"), 0.0])
    checks.add(torch.tensor(2.0), [p], "step 3")
    assert list(checks.faults()) == []  # nothing arrived: no fault yet, none read
    arrived["n"] = 2
    assert list(checks.faults()) == [("the training loss is nan", "step 1")]
    assert list(checks.faults()) == []
    assert list(checks.faults(wait=True)) == [("a gradient is NaN or infinite", "step 3")]
    assert made[2].waited and list(checks.faults(wait=True)) == []


def test_a_check_arriving_late_still_stops_the_run_before_anything_is_saved(
        tiny_sst, tmp_path, capsys, monkeypatch):
    """As on a GPU whose checks arrive only when waited for: the NaN of epoch 2 step 2 is
    found at the end of the epoch, before its state is saved, and named as its own step."""
    from gnn_treelstm.training import trainer

    monkeypatch.setattr(FiniteChecks, "_copied", staticmethod(
        lambda device: _Event(lambda: False)))
    saved = []
    real_save = trainer.Trainer.save_state
    monkeypatch.setattr(trainer.Trainer, "save_state", lambda self, loader: (
        saved.append(all(torch.isfinite(p).all() for p in self.model.parameters())),
        real_save(self, loader))[-1])
    _poison_after(4 + 2, monkeypatch)
    rc = train.main(["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "r",
                     "--epochs", "3", "--batch-size", "4", *TINY])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "the training loss is nan at epoch 2, step 2 (training examples " in err
    assert "holds the last good checkpoint (epoch 1)" in err
    assert saved == [True]  # epoch 1's state, and nothing after the fault
    ck = torch.load(tmp_path / "r" / "best.pt", weights_only=True)
    assert ck["meta"]["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in ck["state_dict"].values())


# the tiny SST dependency trees have 5 relations: a cell built for 1 fails at its first forward
BAD_CELL = ["--model", "mtree", "--tree", "dependency", "--cell-arg", "num_relations=1"]


def test_a_run_failing_before_its_first_epoch_does_not_block_its_retry(
        tiny_sst, tmp_path, capsys):
    from gnn_treelstm.training import rundir

    common = ["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "r",
              "--epochs", "1", *TINY]
    run = tmp_path / "r"
    for _ in range(2):  # the same failing command twice: the same error, no "--overwrite"
        assert train.main([*common, *BAD_CELL]) == 2
        err = capsys.readouterr().err
        assert "num_relations=1" in err and "--overwrite" not in err
        status = rundir.read_status(run)
        assert status["status"] == "failed" and "num_relations=1" in status["error"]
        assert (run / "config.json").is_file() and not (run / rundir.LOCK_NAME).exists()
    assert train.main([*common, "--model", "mtree", "--tree", "dependency"]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["run_id"] == json.loads((run / "results.json").read_text())["run_id"]
    assert config["run_config"]["cell_kwargs"] == {}  # the failed attempt's config is gone
    assert not (run / rundir.STATUS_NAME).exists() and not (run / rundir.LOCK_NAME).exists()


def test_a_run_failing_after_a_finished_epoch_stays_protected(
        tiny_sst, tmp_path, capsys, monkeypatch):
    from gnn_treelstm.training import rundir

    _poison_after(4 + 2, monkeypatch)  # epoch 1 is clean, epoch 2 step 2 is not
    common = ["--data", str(tiny_sst), "--runs-dir", str(tmp_path), "--name", "r",
              "--epochs", "3", "--batch-size", "4", *TINY]
    run = tmp_path / "r"
    assert train.main(common) == 2
    assert rundir.read_status(run)["status"] == "failed"
    assert not (run / rundir.LOCK_NAME).exists()
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    capsys.readouterr()
    assert train.main(common) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
