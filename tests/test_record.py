"""The run record: one writer that checks the types, one loader that converts schema 1, and a
published JSON Schema that must match the types."""

import json
import os
import shutil

import msgspec
import pytest
from conftest import FIXTURES, REPO

from ddpbench.analysis.cpu_denied import run_cpu
from ddpbench.config.spec import RunSpec
from ddpbench.records.schema import RANK_COMPARING_CHECKS, SCHEMA_FILE, SCHEMA_VERSION, Check, json_schema_text
from ddpbench.records.store import UnreadableRecord, load_record, new_record, read_records, write_atomic, write_record

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
BASELINE = os.path.join(REPO, "results", "baselines", "cpu-amd-epyc-2c", "cpu")


def spec(**changes) -> RunSpec:
    return RunSpec(workload="mlp", run_id="r1", **changes)


def test_record_is_written_atomically_and_loads(tmp_path):
    path = write_record(new_record(spec(), "failed"), str(tmp_path))
    assert path == str(tmp_path / "runs" / "r1.json")
    loaded = load_record(path)
    assert loaded.schema_version == SCHEMA_VERSION and loaded.spec == spec()
    assert json.load(open(path))["spec"]["world_size"] == 1  # derived fields are in the file for readers
    assert [n for n in os.listdir(tmp_path / "runs")] == ["r1.json"]  # no temp file left behind


def test_unknown_status_is_refused(tmp_path):
    with pytest.raises(ValueError, match="status"):
        write_record(new_record(spec(), "great"), str(tmp_path))
    assert not os.path.exists(tmp_path / "runs" / "r1.json")


def test_a_part_of_the_wrong_type_is_refused_when_written_not_when_read(tmp_path):
    record = new_record(spec(), "ok")
    # The old flat shape: details beside "ok" are unknown fields of a Check.
    record.checks = {"replicas_in_sync": {"ok": True, "distinct_digests": 1}}
    with pytest.raises(ValueError, match="does not fit its schema"):
        write_record(record, str(tmp_path))
    record.checks = {"replicas_in_sync": Check(ok="yes")}
    with pytest.raises(ValueError, match="checks"):
        write_record(record, str(tmp_path))


def test_a_failed_write_leaves_the_old_file_whole(tmp_path):
    path = str(tmp_path / "x.json")
    write_atomic(path, '{"old": true}')
    with pytest.raises(TypeError):
        write_atomic(path, object())  # fails after the temp file was opened, before the rename
    assert json.load(open(path)) == {"old": True}
    assert os.listdir(tmp_path) == ["x.json"]


@pytest.mark.parametrize(
    "content, reason",
    [
        ({"schema_version": 0}, "schema_version 0"),
        (
            {"schema_version": 7, "run_id": "x"},
            "schema_version 7, this ddpbench reads 1 to 6: it was written by a newer",
        ),
        ({"schema_version": 6, "run_id": "x", "status": "ok"}, "not a valid run record"),
        ([1, 2], "not a run record"),
    ],
)
def test_other_schema_versions_and_non_records_are_named(tmp_path, content, reason):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(content))
    with pytest.raises(UnreadableRecord, match=reason) as error:
        load_record(str(path))
    assert str(path) in str(error.value)


@pytest.mark.parametrize("folder", [SWEEP, BASELINE], ids=["fixture-sweep", "stored-baseline"])
def test_schema_1_records_load_and_convert(folder):
    records, unreadable = read_records(folder)
    assert unreadable == [] and records
    for path, record in records:
        raw = json.load(open(path))
        assert raw["schema_version"] == 1 and record.schema_version == SCHEMA_VERSION
        for name, check in raw.get("checks", {}).items():
            details = {k: v for k, v in check.items() if k not in ("ok", "reason")}
            # One rank's comparisons, stored as passed, are read as not checked (nothing to compare).
            vacuous = record.spec.world_size == 1 and name in RANK_COMPARING_CHECKS
            assert (
                record.checks[name].ok == (None if vacuous else check["ok"]) and record.checks[name].details == details
            )


def test_schema_2_records_load_as_the_current_schema_without_a_machine_load(tmp_path):
    """Records of an earlier version: read as they were, the parts added in 3, 4, 5 and 6 absent, and
    written back in the current schema. What the kernel counted of their CPU reads "not measured",
    never zero."""
    folder = os.path.join(FIXTURES, "sweeps", "slow-rank")
    records, unreadable = read_records(folder)
    assert unreadable == [] and records
    for path, record in records:
        raw = json.load(open(path))
        assert raw["schema_version"] == 2 and record.schema_version == SCHEMA_VERSION == 6
        assert record.compile is None and all(rank.model_state_bytes is None for rank in record.ranks)
        assert all(rank.cpu is None for rank in record.ranks) and run_cpu(record) is None
        steps = [step for rank in (record.timeline.by_rank if record.timeline else []) for step in rank.with_ddp]
        assert all(step.cpu is None for step in steps)
        assert all(rank.model_state_by_part is None for rank in record.ranks)
        assert record.machine_load is None and all(rank.machine_load is None for rank in record.ranks)
        assert record.metrics == msgspec.convert(raw["metrics"], type(record.metrics))
    slow = next(r for _, r in records if r.run_id == "slow2")
    assert slow.timeline is not None and slow.timeline.ladder is not None  # the ladder came with schema 2 files
    write_record(slow, str(tmp_path))
    again = load_record(str(tmp_path / "runs" / "slow2.json"))
    assert json.load(open(tmp_path / "runs" / "slow2.json"))["schema_version"] == 6 and again == slow


def test_a_converted_record_survives_a_write_and_a_load(tmp_path):
    shutil.copytree(SWEEP, tmp_path / "sweep")
    path, record = next((p, r) for p, r in read_records(str(tmp_path / "sweep"))[0] if r.run_id == "mlp-ddp-n2")
    write_record(record, str(tmp_path / "sweep"))
    assert json.load(open(path))["schema_version"] == SCHEMA_VERSION
    assert load_record(path) == record


def test_the_published_json_schema_matches_the_types():
    # Regenerate with: python -m ddpbench.records.schema
    with open(SCHEMA_FILE, encoding="utf-8") as handle:
        assert handle.read() == json_schema_text()


def test_the_json_schema_describes_a_real_record():
    schema = json.loads(json_schema_text())
    record_schema = schema["$defs"]["Record"]
    assert {"run_id", "status", "spec"} <= set(record_schema["required"])
    assert "world_size" in schema["$defs"]["RunSpec"]["properties"]
    # Every field of a real record is described by the schema (no undocumented keys).
    raw = msgspec.to_builtins(load_record(os.path.join(SWEEP, "runs", "mlp-ddp-n2.json")))
    assert set(raw) <= set(record_schema["properties"])


@pytest.mark.parametrize(
    "strategy, bucket_view, kept",
    [
        ("ddp", False, False),  # its figure left out the gradient buckets, a second copy of the gradients
        ("replicate", False, False),
        ("fsdp2", False, False),  # it left out the unsharded parameters and gradients a step holds
        ("ddp", True, True),  # the gradients are the buckets: the figure counted them already
        ("local", False, True),
    ],
)
def test_a_schema_4_model_state_that_left_out_buckets_or_unsharded_buffers_reads_as_not_counted(
    tmp_path, strategy, bucket_view, kept
):
    record = new_record(spec(), "ok")
    raw = json.loads(msgspec.json.encode(record))
    raw["schema_version"] = 4
    raw["spec"]["strategy"] = strategy
    raw["spec"]["ddp"]["gradient_as_bucket_view"] = bucket_view
    raw["ranks"] = [{"rank": 0, "model_state_bytes": 3 * 4 * 1000}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(raw))
    loaded = load_record(str(path))
    assert loaded.schema_version == SCHEMA_VERSION == 6
    assert loaded.ranks[0].model_state_bytes == (3 * 4 * 1000 if kept else None)
    assert loaded.ranks[0].model_state_by_part is None
