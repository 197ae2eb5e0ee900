"""flows/post_train_stages.py: the post-train flows import in one direction (both forms import the shared stages
module, only the dispatcher in flows/post_train.py imports the world-model form), and the one typed summary gives
each form's returned dict exactly its keys, in the order the flow has always returned them."""

from __future__ import annotations

import ast
from pathlib import Path

from flows.post_train_stages import PostTrainSummary
from tests.conftest import ROOT

FLOWS = ROOT / "flows"
COMMON = {"folder": "/p", "exports": {}, "models": [], "stages": [], "evaluations": {}, "uploads": [], "runs": {}}


def _flow_imports(path: Path) -> set[str]:
    """The flows.* modules `path` imports, at any depth (TYPE_CHECKING blocks and functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("flows."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("flows.")}
    return found


def test_the_post_train_flows_import_in_one_direction() -> None:
    stages = _flow_imports(FLOWS / "post_train_stages.py")
    wfm = _flow_imports(FLOWS / "post_train_wfm.py")
    vlm = _flow_imports(FLOWS / "post_train.py")
    assert not {"flows.post_train", "flows.post_train_wfm"} & stages, stages
    assert "flows.post_train" not in wfm and "flows.post_train_stages" in wfm, wfm
    assert {"flows.post_train_stages", "flows.post_train_wfm"} <= vlm, vlm


def test_each_form_returns_exactly_its_keys() -> None:
    vlm = PostTrainSummary(**COMMON, health={}, gates={"sft": {"promoted": True}}, promoted=["sft"]).as_dict()
    assert list(vlm) == [
        *["folder", "exports", "models", "stages", "evaluations", "uploads", "runs", "health"],
        *["gates", "promoted", "stopped", "cards"],
    ]
    assert vlm["gates"] == {"sft": {"promoted": True}} and vlm["stopped"] is None and vlm["cards"] == {}
    # the world-model form gives its evaluation (None too: no [evaluate_wfm]) and takes the gate's defaults
    wfm = PostTrainSummary(**COMMON, health={}, evaluation=None).as_dict()
    assert list(wfm) == [
        *["folder", "exports", "models", "stages", "evaluations", "evaluation", "uploads", "runs", "health"],
        *["gates", "promoted", "stopped", "cards"],
    ]
    assert (wfm["evaluation"], wfm["gates"], wfm["promoted"], wfm["stopped"], wfm["cards"]) == (None, {}, [], None, {})
