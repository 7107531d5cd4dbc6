"""The gradient timeline's hooks on models whose forward does not return a plain tensor (a
user's workload, e.g. a Hugging Face model returning a dict): backward's start must still be
marked, or the replay starts backward at the forward's end and the contention probe skips itself."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ddpbench.worker.grad_timeline import GradTimeline, _first_tensor_with_grad


class DictOutput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, inputs):
        # A tensor without grad first, as a model's attention mask would be.
        return {"mask": torch.ones(inputs.shape[0]), "logits": self.head(torch.relu(self.body(inputs)))}


def test_backward_start_is_marked_for_a_model_that_returns_a_dict():
    torch.manual_seed(0)
    model = DictOutput()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    timeline = GradTimeline(SimpleNamespace(module=model), optimizer, torch.device("cpu"))

    def step_on(batch):
        optimizer.zero_grad(set_to_none=True)
        model(batch)["logits"].square().mean().backward()
        optimizer.step()

    try:
        step = timeline.step(step_on, torch.randn(8, 16))
    finally:
        timeline.remove()
    assert timeline.backward_hooked and "backward_start_s" in timeline.marks  # the hook's mark, not the fallback
    assert step["forward_end_s"] <= step["backward_start_s"] <= min(step["grad_ready_s"])
    assert all(ready is not None for ready in step["grad_ready_s"])


def test_the_first_tensor_with_grad_is_found_inside_containers():
    leaf = torch.ones(2, requires_grad=True)
    with_grad = leaf * 2
    assert _first_tensor_with_grad(with_grad) is with_grad
    assert _first_tensor_with_grad(torch.ones(2)) is None  # nothing backward will reach
    assert _first_tensor_with_grad({"mask": torch.ones(2), "out": (None, [with_grad])}) is with_grad
    assert _first_tensor_with_grad(("text", 3)) is None
    assert _first_tensor_with_grad([[[[with_grad]]]]) is None  # deeper than the search goes
