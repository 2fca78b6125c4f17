"""The data errors' hints name the ``gnn-treelstm build`` command and never propose building
into the raw data."""

from __future__ import annotations

import pytest

from gnn_treelstm.training.data import DataError, resolve_data_dir


def test_a_folder_without_the_data_set_gets_a_hint_outside_it(tmp_path):
    raw = tmp_path / "raw"
    (raw / "sick").mkdir(parents=True)  # a raw mirror without SST
    with pytest.raises(DataError) as exc:
        resolve_data_dir(str(raw), "sst", "constituency", runs_dir=str(tmp_path / "runs"))
    message = str(exc.value)
    assert "gnn-treelstm build --dataset sst" in message and "--out built/sst" in message
    assert f"--out {raw}" not in message and "python -m data_prep.build" not in message
