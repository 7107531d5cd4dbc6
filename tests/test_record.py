import json
import os

import pytest

from ddpbench.records.store import SCHEMA_VERSION, load_record, new_record, write_atomic, write_record


def test_record_is_written_atomically_and_loads(tmp_path):
    record = new_record({"run_id": "r1"}, "failed")
    path = write_record(record, str(tmp_path))
    assert path == str(tmp_path / "runs" / "r1.json")
    assert load_record(path)["schema_version"] == SCHEMA_VERSION
    assert [n for n in os.listdir(tmp_path / "runs")] == ["r1.json"]  # no temp file left behind


def test_unknown_status_is_refused(tmp_path):
    with pytest.raises(ValueError, match="status must be one of"):
        write_record(new_record({"run_id": "r1"}, "great"), str(tmp_path))


def test_a_failed_write_leaves_the_old_file_whole(tmp_path):
    path = str(tmp_path / "x.json")
    write_atomic(path, '{"old": true}')
    with pytest.raises(TypeError):
        write_atomic(path, object())  # fails after the temp file was opened, before the rename
    assert json.load(open(path)) == {"old": True}
    assert os.listdir(tmp_path) == ["x.json"]


def test_other_schema_versions_are_named(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 0}))
    with pytest.raises(ValueError, match="schema_version 0"):
        load_record(str(path))
