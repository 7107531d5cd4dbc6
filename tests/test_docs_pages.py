"""The metrics reference in docs/ is rendered from the code's definitions and must match them."""

from __future__ import annotations

import pytest

from ddpbench import docs_pages
from ddpbench.analysis.causes import CAUSES, CHECKS
from ddpbench.analysis.registry import METRICS


def test_the_committed_metrics_reference_is_what_the_generator_renders():
    with open(docs_pages.PAGE, encoding="utf-8") as page:
        committed = page.read()
    assert committed == docs_pages.render(), (
        "docs/metrics-reference.md is out of date with the metrics registry, the explain terms or the "
        f"report's glossary: run `{docs_pages.REGENERATE}` and commit the page"
    )


def test_every_metric_term_and_glossary_entry_is_on_the_page():
    page = docs_pages.render()
    for metric in METRICS:
        assert f"| `{metric.name}` | {metric.label} |" in page
    for term in (*CAUSES, *CHECKS):
        assert f"| `{term.name}` |" in page
    glossary = docs_pages.report_glossary()
    assert glossary, "the report's glossary was not found"
    for term, _ in glossary:
        assert f"| {term} |" in page


def test_a_pipe_in_a_definition_does_not_break_the_table():
    assert docs_pages._cell("a | b\n  c") == "a \\| b c"


def test_the_glossary_reader_refuses_a_source_without_one(tmp_path):
    source = tmp_path / "html.py"
    source.write_text("OTHER = []\n")
    with pytest.raises(ValueError, match="no GLOSSARY"):
        docs_pages.report_glossary(str(source))


def test_the_command_writes_the_page_and_refuses_a_missing_folder(tmp_path, capsys):
    page = tmp_path / "reference.md"
    assert docs_pages.main([str(page)]) == 0
    assert page.read_text() == docs_pages.render()
    assert docs_pages.main([str(tmp_path / "missing" / "reference.md")]) == 2
    assert "usage:" in capsys.readouterr().err
