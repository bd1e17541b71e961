"""rctb.run_scenario and rctb.sweep: the testbench's reports as dicts,
identical to what `rctb run --json` prints for the same file and seed."""

import json
import os
import pathlib
import shutil
import subprocess

import pytest

import rctb

ROOT = pathlib.Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.toml"


def rctb_binary():
    for candidate in (os.environ.get("RCTB_BIN"), ROOT / "target" / "debug" / "rctb", ROOT / "target" / "release" / "rctb", shutil.which("rctb")):
        if candidate and pathlib.Path(candidate).is_file():
            return str(candidate)
    return None


def test_run_scenario_returns_the_json_report():
    report = rctb.run_scenario(QUICKSTART, seed=7)
    assert report["seed"] == 7 and report["passed"] is True
    assert report["scenario"] and report["streams"]
    again = rctb.run_scenario(str(QUICKSTART), seed=7)
    assert again == report, "seed 7 did not replay"


def test_run_scenario_matches_the_cli():
    binary = rctb_binary()
    if binary is None:
        pytest.skip("no rctb binary (cargo build -p rctb, or set RCTB_BIN)")
    out = subprocess.run([binary, "run", str(QUICKSTART), "--seed", "11", "--json"], capture_output=True, check=True, text=True)
    assert rctb.run_scenario(QUICKSTART, seed=11) == json.loads(out.stdout)


def test_sweep_lists_every_seed_with_its_replay():
    rows = rctb.sweep(QUICKSTART, 3, start=5, jobs=2)
    assert [r["seed"] for r in rows] == [5, 6, 7]
    assert all(r["passed"] and r["failures"] == [] for r in rows)
    assert rows[0]["replay"] == "rctb run %s --seed 5" % QUICKSTART


def test_bad_scenario_arguments(tmp_path):
    with pytest.raises(OSError, match="no such file"):
        rctb.run_scenario(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = 3\n[[nonsense\n")
    with pytest.raises(ValueError):
        rctb.run_scenario(bad)
    with pytest.raises(ValueError, match="seeds must be at least 1"):
        rctb.sweep(QUICKSTART, 0)
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        rctb.sweep(QUICKSTART, 1, jobs=0)
    with pytest.raises(OverflowError):
        rctb.run_scenario(QUICKSTART, seed=-1)
