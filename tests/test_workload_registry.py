import pytest
import torch
from torch.utils.data.dataloader import default_collate

from ddpbench.config.spec import SpecError
from ddpbench.config.workloads import BUILTIN_WORKLOADS, check_workload_name
from ddpbench.worker.workload import Workload, build_workload


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(SpecError) as error:
        check_workload_name("resnet5O")
    message = str(error.value)
    assert "unknown workload 'resnet5O'" in message
    for name in ("gpt2", "mlp", "resnet50", "vit_b_16", "path/to/file.py:factory"):
        assert name in message


def test_user_file_problems_are_named(tmp_path, fixture_path):
    with pytest.raises(SpecError, match="does not exist"):
        check_workload_name(str(tmp_path / "nope.py") + ":f")
    with pytest.raises(SpecError, match=r"defines no 'missing' \(it defines: regression\)"):
        check_workload_name(fixture_path("user_workload.py") + ":missing")
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n")
    with pytest.raises(SpecError, match="not valid Python"):
        check_workload_name(f"{bad}:f")


def test_checking_a_user_file_does_not_run_it(tmp_path):
    marker = tmp_path / "ran"
    user = tmp_path / "wl.py"
    user.write_text(f"open({str(marker)!r}, 'w').close()\ndef factory(size, data_dir=None): pass\n")
    check_workload_name(f"{user}:factory")
    assert not marker.exists()


def test_a_factory_must_return_a_workload(tmp_path):
    user = tmp_path / "wl.py"
    user.write_text("def factory(size, data_dir=None):\n    return 42\n")
    with pytest.raises(TypeError, match="returned int, not Workload"):
        build_workload(f"{user}:factory", "tiny", None)


@pytest.mark.parametrize("name", sorted(BUILTIN_WORKLOADS))
def test_every_builtin_tiny_workload_trains_one_step(name):
    workload = build_workload(name, "tiny", None)
    assert isinstance(workload, Workload) and workload.batch_size >= 1
    dataset = workload.make_dataset(16)
    assert len(dataset) == 16
    inputs, targets = default_collate([dataset[i] for i in range(4)])
    loss = workload.loss(workload.model(inputs), targets)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in workload.model.parameters())


def test_synthetic_data_is_deterministic():
    first = build_workload("vit_b_16", "tiny", None).make_dataset(8)
    second = build_workload("vit_b_16", "tiny", None).make_dataset(8)
    assert torch.equal(first[3][0], second[3][0]) and first[3][1] == second[3][1]


def test_gpt2_full_is_gpt2_small_sized():
    # Build on the meta device: checks the 124M parameter count without allocating 500 MB.
    from workloads.gpt import GPT, SIZES

    with torch.device("meta"):
        model = GPT(SIZES["full"])
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(124.4e6, rel=0.01)


def test_image_workload_reads_a_real_image_folder(tmp_path):
    from PIL import Image

    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        for i in range(3):
            Image.new("RGB", (40, 48), color=(i * 40, 100, 200)).save(tmp_path / label / f"{i}.png")
    workload = build_workload("resnet50", "tiny", str(tmp_path))
    dataset = workload.make_dataset(1000)  # a real folder ignores the synthetic length
    assert len(dataset) == 6
    image, label = dataset[5]
    assert image.shape == (3, 32, 32) and label == 1
