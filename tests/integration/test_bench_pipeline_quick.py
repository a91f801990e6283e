"""`tsm bench pipeline --quick` as a smoke test: it runs, and the contenders agree.

No timing assertions: the machine is shared and the numbers are noise here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_quick_pipeline_bench_contenders_agree(tmp_path):
    out = tmp_path / "bench" / "pipeline.json"
    command = [sys.executable, "-m", "tsm_cli", "bench", "pipeline", "--quick"]
    done = subprocess.run(
        [*command, "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    (size,) = result["sizes"]
    assert size["agreement"] == "same pairs"
    rows = {r["contender"]: r for r in size["rows"]}
    assert set(rows) == {"product", "output-only", "no-op", "native-join"}
    assert all(r["complete"] for r in rows.values())
    assert rows["product"]["pairs"] == rows["native-join"]["pairs"] > 0
    # the output-only wrote the product's records again: the same pairs
    assert rows["output-only"]["pairs"] == rows["product"]["pairs"]
    # the product's steady phase read its profiles (the others have none)
    assert rows["product"]["steady"]["rows"] == result["plan"]["steady"] > 0
    assert all(rows[name]["steady"] is None for name in ("output-only", "no-op", "native-join"))
    assert (tmp_path / "bench" / "pipeline.png").is_file()
    assert "<!-- pipeline -->" in (tmp_path / "bench" / "README.md").read_text()
    assert "| product / no-op" in done.stdout and "| product / output-only" in done.stdout
    (ratios,) = result["ratios"]
    assert ratios["product/output-only"] > 0
