"""Secrets in a script's own arguments (`ddpbench run --script train.py -- --hf-token hf_...`): found
by the option's name or by the value's look, and hidden wherever ddpbench writes the arguments down
(the record, its launch command, the sweep's manifest, the batch script). The script itself still
gets them as given. No torch."""

from __future__ import annotations

import json
import re

HIDDEN = "<redacted>"
# The last part of an option's name (split at - _ .) that marks its value as a secret: --hf-token,
# --wandb_api_key, --trainer.logger.init_args.password. Last and whole parts only: --max-tokens,
# --num-key-value-heads and --key-file stay.
SECRET_NAME_PARTS = {"token", "key", "apikey", "secret", "password", "passwd", "credential", "credentials", "auth"}
# Values that are secrets whatever option carries them: Hugging Face, OpenAI-style, GitHub, Slack
# and AWS access keys.
SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})"
)


def _secret_name(option: str) -> bool:
    parts = [part for part in re.split(r"[-_.]+", option.lstrip("-").lower()) if part]
    return bool(parts) and parts[-1] in SECRET_NAME_PARTS


def secret_positions(args: tuple[str, ...] | list[str]) -> set[int]:
    """Indices of the arguments that hold a secret (for `--name=value`, the whole argument)."""
    found = set()
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if arg.startswith("-") and _secret_name(name):
            if equals:
                found.add(index)
            elif index + 1 < len(args) and not args[index + 1].startswith("-"):
                found.add(index + 1)
        if SECRET_VALUE.search(value if equals else arg):
            found.add(index)
    return found


def redact_args(args: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    hidden = secret_positions(args)
    return tuple(
        (arg.partition("=")[0] + "=" + HIDDEN if "=" in arg and arg.startswith("-") else HIDDEN) if i in hidden else arg
        for i, arg in enumerate(args)
    )


def redact_spec_dict(spec: dict) -> dict:
    """A RunSpec's dict (the manifest's plan, --spec-json) with its script's secrets hidden."""
    script = spec.get("script")
    if not script or not script.get("args"):
        return spec
    return {**spec, "script": {**script, "args": list(redact_args(script["args"]))}}


def redact_command(command: list[str]) -> list[str]:
    """A launch command with the secrets of its --spec-json hidden."""
    shown = list(command)
    for index, word in enumerate(shown[:-1]):
        if word == "--spec-json":
            try:
                shown[index + 1] = json.dumps(redact_spec_dict(json.loads(shown[index + 1])), sort_keys=True)
            except ValueError:
                pass
    return shown


SECRET_VARIABLE = "DDPBENCH_SECRET_{}"


def hide_in_batch_script(argv: list[str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """A sweep's command line for a batch script: each secret after `--` replaced by a placeholder.
    Returns (argv, placeholder -> shell text reading the variable, variable -> value): the script
    reads the values from the environment sbatch passes to the job, never from its file."""
    if "--" not in argv:
        return argv, {}, {}
    cut = argv.index("--") + 1
    script_args = argv[cut:]
    shown, words, values = list(argv), {}, {}
    for number, index in enumerate(sorted(secret_positions(script_args)), start=1):
        variable = SECRET_VARIABLE.format(number)
        placeholder = f"__{variable}__"
        arg = script_args[index]
        prefix = arg.partition("=")[0] + "=" if arg.startswith("-") and "=" in arg else ""
        shown[cut + index] = prefix + placeholder
        words[placeholder] = f'"${{{variable}:?export {variable}: a secret argument of the script}}"'
        values[variable] = arg[len(prefix) :]
    return shown, words, values


def has_hidden(args: tuple[str, ...] | list[str]) -> bool:
    return any(arg == HIDDEN or arg.endswith("=" + HIDDEN) for arg in args)


# In free text (a log, a record read as text): an environment variable whose name says secret, as
# NAME=value or "NAME": "value", and a command-line option whose last name part says so, as in
# secret_positions.
_SECRET_VARIABLE = re.compile(
    r'(\b[A-Z0-9_]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Z0-9_]*(?:=|"\s*:\s*"))([^\s"\',]+)'
)
_SECRET_OPTION = re.compile(
    r"(--(?:[A-Za-z0-9]+[-_.])*(?:" + "|".join(sorted(SECRET_NAME_PARTS)) + r")(?:=|\s+))(?!-)([^\s\"',]+)",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """Any text with its secrets hidden: access keys by their look, secret-named variables and options,
    and the password of a user:password@ URL (the record's own rule for variable values)."""
    from ddpbench.host.facts import redact_value

    text = SECRET_VALUE.sub(HIDDEN, text)
    text = _SECRET_VARIABLE.sub(lambda match: match[1] + HIDDEN, text)
    text = _SECRET_OPTION.sub(lambda match: match[1] + HIDDEN, text)
    return redact_value(text)
