import pytest

from ddpbench.host.facts import REDACTED, captured_env, host_facts, redact_value


def test_secret_looking_names_are_redacted():
    env = captured_env(
        {
            "NCCL_DEBUG": "INFO",
            "TORCH_HUB_TOKEN": "hf_abc",
            "NCCL_IB_SECRET_KEY": "s3cr3t",
            "CUDA_PASSWORD": "x",
            "OMP_CREDENTIALS": "y",
            "NVIDIA_TF32_OVERRIDE": "0",  # TF32 off below torch: changes fp32 products
            "HOME": "/root",  # not a variable that changes how torch runs: not captured at all
        }
    )
    assert env == {
        "NCCL_DEBUG": "INFO",
        "TORCH_HUB_TOKEN": REDACTED,
        "NCCL_IB_SECRET_KEY": REDACTED,
        "CUDA_PASSWORD": REDACTED,
        "OMP_CREDENTIALS": REDACTED,
        "NVIDIA_TF32_OVERRIDE": "0",
    }


def test_passwords_inside_urls_are_redacted():
    assert redact_value("etcd://alice:hunter2@host:2379/x") == f"etcd://alice:{REDACTED}@host:2379/x"
    assert redact_value("http://host:8080/path") == "http://host:8080/path"
    env = captured_env({"TORCH_STORE_URL": "https://bob:pw@store:443"})
    assert env["TORCH_STORE_URL"] == f"https://bob:{REDACTED}@store:443"


def test_host_facts_describe_this_machine():
    facts = host_facts()
    # not chance: a count of cores
    assert facts["cpu_cores"] >= 1 and facts["hostname"] and facts["python"]
    assert "git_sha" in facts and "env_vars" in facts


@pytest.mark.launches  # a fresh interpreter that imports the worker
def test_the_torchvision_version_is_the_packages_own_and_a_worker_does_not_import_it():
    """The record keeps torchvision's own version string (its build tag included) while a rank
    whose workload never uses torchvision does not pay its import: a fresh interpreter that has
    not imported it reads the same string as torchvision reports once imported."""
    import subprocess
    import sys

    import torchvision  # here only for the version it reports itself

    probe = (
        "import sys, ddpbench.worker.main as m; from ddpbench.worker.environment import torch_facts; "
        "v = torch_facts()['torchvision']; print(v, 'torchvision' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(torchvision.__version__), "False"]
