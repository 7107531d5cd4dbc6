"""docs/gpu-quickstart.md runs as written: every command on it resolves inside the container image
(the files container/Dockerfile copies), every command that works on CPU runs and prints what the
page promises (the plan's runs, minutes and disk; the log path of a failed run), and the bundle a
user sends back holds the records, logs, environment and explain's JSON with secrets hidden."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile

import pytest
from conftest import FIXTURES, REPO, ddpbench, ddpbench_process

from ddpbench.cli import build_parser
from ddpbench.config.plan import SUITES

PAGE = os.path.join(REPO, "docs", "gpu-quickstart.md")
HOST_TOOLS = {"nvidia-smi", "podman", "docker"}
"""Commands the page runs on the host, around the image: not inside it."""


def page_text() -> str:
    with open(PAGE, encoding="utf-8") as handle:
        return handle.read()


def page_commands() -> list[list[str]]:
    """Every command of the page's ```sh blocks, as words, without comments and variable settings."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", page_text(), re.S):
        for line in block.splitlines():
            line = re.split(r"\s{2,}#", line.strip())[0].strip()
            if not line:
                continue
            words = shlex.split(line)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            commands.append(words)
    return commands


def image_files() -> set[str]:
    """The checkout's files the image's recipe copies (a folder: every tracked file under it)."""
    with open(os.path.join(REPO, "container", "Dockerfile"), encoding="utf-8") as handle:
        sources = [word for line in handle if line.startswith("COPY") for word in line.split()[1:-1]]
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    files = set(tracked.split())
    assert files, "git ls-files found nothing"
    return {f for f in files for source in sources if f == source or f.startswith(source.rstrip("/") + "/")}


def local_imports(path: str, folder: str) -> set[str]:
    """Files of `folder` that the module at `path` imports, and theirs in turn."""
    found: set[str] = set()
    todo = [path]
    while todo:
        with open(os.path.join(REPO, todo.pop()), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in ast.walk(tree):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                candidate = f"{folder}/{name}.py"
                if os.path.exists(os.path.join(REPO, candidate)) and candidate not in found:
                    found.add(candidate)
                    todo.append(candidate)
    return found


def make_targets() -> dict[str, str]:
    """Makefile target -> its recipe (the lines after it, up to the next blank line)."""
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as handle:
        text = handle.read()
    return {m[1]: m[2] for m in re.finditer(r"(?m)^([a-z-]+):[^\n=]*\n((?:.+\n)*)", text)}


def test_every_command_on_the_page_resolves_inside_the_container_image():
    image = image_files()
    targets = make_targets()
    kinds = set()
    for words in page_commands():
        program = words[0]
        if program in HOST_TOOLS:
            continue
        if program == "make":
            kinds.add("make")
            assert "Makefile" in image and "constraints.txt" in image
            target = next(w for w in words[1:] if "=" not in w)
            assert target in targets, f"make {target}: no such target"
            if target == "gpu-check":
                assert "benchmarks/gpu_check.py" in targets[target]
                script = "benchmarks/gpu_check.py"
                needed = {script, *local_imports(script, "benchmarks")}
                # the CUDA tests it runs, and what they import (of the tests and of the GPU check)
                needed |= {"tests/test_cuda.py", *local_imports("tests/test_cuda.py", "tests")}
                needed |= local_imports("tests/test_cuda.py", "benchmarks")
                assert needed <= image, f"not in the image: {sorted(needed - image)}"
                assert {"benchmarks/gpu_check_plan.py", "tests/conftest.py"} <= needed
            continue
        assert words[:3] == ["python", "-m", "ddpbench"], words
        kinds.add("ddpbench")
        assert "ddpbench/__main__.py" in image and "workloads/gpt.py" in image
        # Every option the page gives is one the command takes (--data-dir is not a sweep's).
        arguments = [w.replace("<sweep-id>", "x").replace("<time>", "t") for w in words[3:]]
        build_parser().parse_args(arguments)
    assert kinds == {"make", "ddpbench"}


def test_the_page_gives_no_option_a_command_does_not_take():
    # A sweep takes --data-dir (as run does), so that a reproduce command reads the image folder
    # its runs read; the page's sweep reads synthetic data.
    assert not any(w[3:4] == ["sweep"] and "--data-dir" in w for w in page_commands())
    assert build_parser().parse_args(["sweep", "--gpus", "8", "--data-dir", "/data"]).data_dir == "/data"
    assert "make gpu-check USE_PYTHON=python" in page_text() and not re.search(r"(?<!USE_)PYTHON=", page_text())


def dry_runs() -> list[list[str]]:
    return [words[3:] for words in page_commands() if "--dry-run" in words]


def test_the_pages_runs_minutes_and_disk_are_what_the_plan_prints():
    text = page_text()
    rows = dict(re.findall(r"\n\| `(\w+)` \| (\d+ \| about \d+ minutes \| about [\d.]+ [MG]B) \|", text))
    assert set(rows) == {"smoke", "gpu"}
    assert len(dry_runs()) == 2
    for arguments in dry_runs():
        done = ddpbench(*arguments)
        assert done.returncode == 0, done.stderr
        suite = arguments[arguments.index("--suite") + 1] if "--suite" in arguments else "gpu"
        runs = re.search(r"sweep plan: (\d+) runs on a node of 8 GPUs", done.stdout)[1]
        minutes = re.search(r"estimated time: about (\d+) minutes", done.stdout)[1]
        disk = re.search(r"estimated trace disk: about ([\d.]+ [MG]B)", done.stdout)[1]
        assert rows[suite] == f"{runs} | about {minutes} minutes | about {disk}", done.stdout
        assert "nothing started" in done.stdout
    # The prose reads the same plan: 27 smoke runs, 9 configurations x 3; dp's copies and gradient sums
    # through torch.cuda.comm, which calls NCCL (its broadcast and reduce), though dp has no process group.
    smoke = ddpbench(*dry_runs()[0]).stdout
    assert "27 runs" in smoke and "dp x1, x2, x4, x8 (one process; NCCL through torch.cuda.comm)" in smoke
    prose = " ".join(text.split())
    assert "The smoke suite runs 27 short runs of a tiny model: 9 configurations" in prose
    assert "through `torch.cuda.comm`, which calls NCCL's broadcast and reduce" in prose
    assert "no NCCL" not in prose


def test_the_nccl_debug_run_is_the_suites_resnet50_configuration():
    (words,) = [w for w in page_commands() if w[3:4] == ["run"]]
    args = build_parser().parse_args(words[3:])
    gpu = SUITES["gpu"]
    assert (args.workload, args.size, args.precision) == ("resnet50", gpu.size, gpu.precision)
    assert (args.batch_size, args.steps, args.warmup) == (gpu.workloads["resnet50"], gpu.steps, gpu.warmup)
    assert args.nproc == 8 and args.device == "cuda"
    assert "NCCL_DEBUG=INFO python -m ddpbench run" in page_text()


SECRETS = {
    "hf_abcdefghijklmnopqrstuvwx": "an access key by its look",
    "s3cr3t-value": "a secret-named variable",
    "pa55word": "a URL's password",
    "tok-123456": "a secret-named option",
}
PLANTED = (
    "\nHF_TOKEN=hf_abcdefghijklmnopqrstuvwx\nWANDB_API_KEY=s3cr3t-value\n"
    "store at https://ddp:pa55word@store.example:443/x\ntrain.py --wandb-token tok-123456 --max-tokens 7\n"
)


def bundled(path) -> dict[str, str]:
    with tarfile.open(path) as archive:
        return {
            member.name: archive.extractfile(member).read().decode("utf-8", "replace")
            for member in archive.getmembers()
        }


def test_bundle_gathers_records_environment_and_explain_with_secrets_hidden(tmp_path):
    sweep = tmp_path / "sweep"
    shutil.copytree(os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure"), sweep)
    (sweep / "logs" / "broken-ddp-n2").mkdir(parents=True)
    (sweep / "logs" / "broken-ddp-n2" / "output.log").write_text("rank 1 raised RuntimeError" + PLANTED)
    # Traces deeper down (a GPU check keeps one traces/ folder per check) and a trace outside any.
    (sweep / "checks" / "one" / "traces" / "r").mkdir(parents=True)
    (sweep / "checks" / "one" / "traces" / "r" / "rank-0.pt.trace.json.gz").write_bytes(b"x" * 1000)
    (sweep / "checks" / "loose.pt.trace.json").write_text("{}")
    done = ddpbench("bundle", str(sweep))
    assert done.returncode == 0, done.stderr
    files = bundled(f"{sweep}-bundle.tar.gz")
    size = os.path.getsize(f"{sweep}-bundle.tar.gz") / 2**20
    assert (
        f"bundle: {sweep}-bundle.tar.gz ({size:.1f} MiB, " in done.stdout and "10 records, 1 log files" in done.stdout
    )
    assert {"sweep/manifest.json", "sweep/runs/broken-ddp-n2.json", "sweep/logs/broken-ddp-n2/output.log"} <= set(files)
    assert not any("/traces/" in name or ".pt.trace." in name for name in files)  # large; --with-traces adds them
    environment = json.loads(files["sweep/bundle/environment.json"])
    assert environment["packages"]["torch"] and "env_vars" in environment
    explained = json.loads(files["sweep/bundle/explain.json"])
    assert explained.get("configurations") or explained.get("error")
    everything = "\n".join(files.values())
    for secret, kind in SECRETS.items():
        assert secret not in everything, kind
    log = files["sweep/logs/broken-ddp-n2/output.log"]
    assert "HF_TOKEN=<redacted>" in log and "--wandb-token <redacted>" in log and "--max-tokens 7" in log
    assert "https://ddp:<redacted>@store.example" in log
    for name in ("sweep/runs/broken-ddp-n2.json", "sweep/bundle/explain.json"):
        json.loads(files[name])  # redaction keeps the JSON readable
    assert ddpbench("bundle", str(tmp_path / "missing")).returncode == 2
    assert ddpbench("bundle", str(sweep), "--with-traces", "--out", str(tmp_path / "all.tar.gz")).returncode == 0
    with_traces = bundled(tmp_path / "all.tar.gz")
    assert {"sweep/checks/one/traces/r/rank-0.pt.trace.json.gz", "sweep/checks/loose.pt.trace.json"} <= set(with_traces)


@pytest.mark.launches
def test_a_failed_run_keeps_its_output_where_the_page_says_and_bundles(tmp_path):
    """One short real run that fails (an injected error, one process): its output is under
    results/single/logs/<run-id>/, as the page's NCCL_DEBUG paragraph says, and it bundles."""
    assert "`results/single/logs/<run-id>/output.log`" in page_text()
    done = ddpbench_process(
        "run", "--workload", "mlp", "--strategy", "local", "--device", "cpu", "--steps", "4", "--warmup", "1",
        "--no-profile", "--run-id", "broken", "--inject-fault", "rank=0,kind=raise,step=2",
        cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    log = tmp_path / "results" / "single" / "logs" / "broken" / "output.log"
    assert log.exists() and "injected fault" in log.read_text()
    assert "results/single/logs/broken" in done.stdout + done.stderr  # the failed run names the folder
    with open(log, "a") as handle:
        handle.write(PLANTED)
    bundle = ddpbench_process("bundle", "results/single", cwd=str(tmp_path))
    assert bundle.returncode == 0, bundle.stderr
    files = bundled(tmp_path / "results" / "single-bundle.tar.gz")
    assert "single/runs/broken.json" in files and "single/logs/broken/output.log" in files
    assert not any(secret in "\n".join(files.values()) for secret in SECRETS)


def image_layout() -> dict[str, str]:
    """Checkout file -> its path in the image, from the recipe's COPY lines (a folder source copies
    its tracked files below the destination folder; a destination ending in '/' takes each file's name)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    layout = {}
    with open(os.path.join(REPO, "container", "Dockerfile"), encoding="utf-8") as handle:
        for line in handle:
            if not line.startswith("COPY"):
                continue
            *sources, destination = line.split()[1:]
            for source in sources:
                for path in tracked:
                    if path == source:
                        name = os.path.basename(path)
                        layout[path] = destination + name if destination.endswith("/") else destination
                    elif path.startswith(source.rstrip("/") + "/"):
                        layout[path] = destination.rstrip("/") + path[len(source.rstrip("/")) :]
    return layout


def test_the_image_keeps_the_checkouts_layout_in_the_folder_the_page_starts_in():
    """The page starts the container with `-w FOLDER`; every file the image holds lies at its checkout
    path below FOLDER, so the Makefile's relative paths (benchmarks/gpu_check.py, tests/test_cuda.py,
    pyproject.toml for `make install`) resolve as they do in a checkout."""
    [folder] = {words[words.index("-w") + 1] for words in page_commands() if words[:2] == ["podman", "run"]}
    layout = image_layout()
    assert layout, "the recipe copies nothing"
    moved = {path: where for path, where in layout.items() if where != f"{folder}/{path}"}
    assert moved == {}, moved
    # `make install USE_PYTHON=...` reads pyproject.toml through ddpbench.host.torch_env.
    assert "$(PY) -m ddpbench.host.torch_env --requirements ." in make_targets_text()
    assert {"pyproject.toml", "constraints.txt", "Makefile", "ddpbench/host/torch_env.py"} <= set(layout)


def make_targets_text() -> str:
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as handle:
        return handle.read()
