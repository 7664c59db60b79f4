"""The benchmark report keeps what its generators do not own.

A run of ``bench/foundation.py`` once rewrote docs/benchmarks.md from its own part and the
marked sections of the others, and so dropped every hand-written section (a thousand lines,
the diskless and metadata-at-scale figures among them). Its part is now a marked section
like every other one.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import foundation  # noqa: E402

NEW = "<!-- foundation:start -->\n## Foundation\n\nnew figures\n<!-- foundation:end -->"


def test_a_rewrite_keeps_hand_written_sections_and_replaces_only_its_own(tmp_path):
    md = tmp_path / "benchmarks.md"
    md.write_text("# Strata benchmarks\n\n<!-- summary:start -->\nsum\n<!-- summary:end -->\n\n"
                  "<!-- foundation:start -->\n## Foundation\n\nold figures\n<!-- foundation:end -->\n\n"
                  "## Diskless topics (written by hand)\n\nkept\n\n"
                  "<!-- kafka-peer:start -->\npeer\n<!-- kafka-peer:end -->\n\nanalysis below\n")
    foundation.place_section(md, foundation.FOUNDATION, NEW)
    text = md.read_text()
    assert "old figures" not in text and text.count("new figures") == 1
    for kept in ("<!-- summary:start -->\nsum", "## Diskless topics (written by hand)\n\nkept",
                 "<!-- kafka-peer:start -->\npeer", "analysis below"):
        assert kept in text
    assert text.index("sum") < text.index("new figures") < text.index("kept") < text.index("analysis below")


def test_a_report_without_the_section_gets_it_after_the_summary(tmp_path):
    md = tmp_path / "benchmarks.md"
    md.write_text("# Strata benchmarks\n\n<!-- summary:start -->\nsum\n<!-- summary:end -->\n\n## By hand\n\nx\n")
    foundation.place_section(md, foundation.FOUNDATION, NEW)
    text = md.read_text()
    assert text.index("<!-- summary:end -->") < text.index("new figures") < text.index("## By hand")


def test_a_new_report_gets_the_title_and_the_section(tmp_path):
    md = tmp_path / "benchmarks.md"
    foundation.place_section(md, foundation.FOUNDATION, NEW)
    text = md.read_text()
    assert text.startswith(foundation.REPORT_TITLE) and "new figures" in text
    foundation.place_section(md, foundation.FOUNDATION, NEW.replace("new", "newer"))
    assert md.read_text().count("figures") == 1
