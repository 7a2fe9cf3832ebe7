"""The carbon of an estimate's energy: a grid's intensity times PUE, the grid named or given, every bad one a line."""

import json

import pytest

import joulecast
from joulecast.cli import main
from joulecast.data.carbon import carbon, grid_at
from joulecast.data.errors import InputError
from joulecast.data.job_file import reference


def test_carbon_is_the_energy_in_kwh_times_pue_and_the_grid_s_intensity_interval_and_all():
    table = reference("grid_carbon")
    run = joulecast.train_run("gpt2", "a10", seq=128, global_batch=8, steps=20)
    out = carbon(run, "de", pue="hyperscale")  # a country's code in either case, PUE by name
    factor = table["g_per_kwh"]["DE"] * table["pue"]["hyperscale"] / 3.6e6
    assert out["carbon_g"] == pytest.approx(run.energy_j * factor)
    assert out["carbon_interval_g"] == pytest.approx([e * factor for e in run.energy_interval_j])
    assert out["carbon_per_token_g"] == pytest.approx(run.energy_per_token_j * factor)
    assert out["carbon"]["grid"] == "DE" and out["carbon"]["pue"] == table["pue"]["hyperscale"]
    default = joulecast.carbon(run.to_dict())  # the package's API, on the JSON's figures too
    assert default["carbon"]["grid"] == "WORLD" and default["carbon"]["pue"] == table["pue"]["average"]
    given = carbon(run, carbon_intensity=0.0, pue=1.0)
    assert given["carbon_g"] == 0.0 and given["carbon"]["grid"] == "given"
    # a serving load without a duration has no whole energy: its carbon stays empty, a token's is given
    load = joulecast.serve("gpt2", "a10", concurrency=4, input_len=32, output_len=8, estimator="physics")
    served = carbon(load, grid_at("FR", pue=1.2))
    assert served["carbon_g"] is None and served["carbon_per_output_token_g"] == pytest.approx(
        load.energy_per_output_token_j * table["g_per_kwh"]["FR"] * 1.2 / 3.6e6)


def test_on_an_hourly_series_the_energy_is_spread_over_the_job_s_time_from_its_start(tmp_path, capsys):
    """A series repeats from the job's start (as a plan's sites read it); a job of a few milliseconds reads its first
    hour, one of 4.5 hours its whole laps and half of the next hour; a serving load without a duration the mean."""
    where = grid_at(carbon_series=[100, 300], pue=1.0)
    assert where.intensity(None) == where.g_per_kwh == 200.0 and where.intensity(0.01) == 100.0
    assert where.intensity(4.5 * 3600) == pytest.approx((2 * 400 + 0.5 * 100) / 4.5)
    run = joulecast.train_run("gpt2", "a10", seq=512, global_batch=8, steps=5000, estimator="physics")
    out = carbon(run, carbon_series=[100, 300], pue=1.0)
    assert out["carbon_g"] == pytest.approx(run.energy_j / 3.6e6 * float(where.intensity(run.time_s)))
    assert out["carbon"]["g_per_kwh"] == pytest.approx(float(where.intensity(run.time_s)))
    load = joulecast.serve("gpt2", "a10", concurrency=4, input_len=32, output_len=8, estimator="physics")
    assert carbon(load, carbon_series=[100, 300])["carbon"]["g_per_kwh"] == 200.0  # around the clock
    path = tmp_path / "hourly.csv"
    path.write_text("hour,g_per_kwh\n0,100\n1,300\n")
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--estimator", "physics", "--carbon-series",
                 str(path), "--pue", "1", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["carbon"]["g_per_kwh"] == pytest.approx(100.0) and one["carbon"]["series_hours"] == 2  # its first hour
    path.write_text("g_per_kwh\n100\nlots\n")
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--carbon-series", str(path)]) == 2
    assert "--carbon-series: " in capsys.readouterr().err
    path.write_text("g_per_kwh\n" + "100\n" * 9_000)  # over a year of hours: the file named, not the API's field
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--carbon-series", str(path)]) == 2
    assert f"--carbon-series: {path}: must hold 1 to 8,784 hourly figures (a year of hours), got 9,000" in \
        capsys.readouterr().err


@pytest.mark.parametrize("kw, message", [
    (dict(name="mars"), "grid: unknown 'mars'; known: FR, FI, "),
    # a number where the grid goes (carbon(est, 300)) is the intensity meant: its field named
    (dict(name=300), "grid: a country code, got the number 300; a grid's gCO2e a kWh is carbon_intensity"),
    (dict(name="DE", carbon_intensity=300), "carbon_intensity: give one of grid, carbon_intensity and carbon_series, "
                                            "not grid and carbon_intensity"),
    (dict(carbon_series=[100, -1]), "carbon_series[1]: must be gCO2e a kWh from 0 to 2,000, got -1"),
    (dict(carbon_series=[]), "carbon_series: must hold 1 to 8,784 hourly figures (a year of hours), got 0"),
    (dict(carbon_series=[1.0] * 9_000), "carbon_series: must hold 1 to 8,784 hourly figures (a year of hours), got "
                                        "9,000"),
    (dict(carbon_series="100"), "carbon_series: must be a list of hourly figures .* got text"),
    (dict(carbon_intensity=-1), "carbon_intensity: must be gCO2e a kWh from 0 to 2,000, got -1"),
    (dict(carbon_intensity=float("nan")), "carbon_intensity: must be gCO2e a kWh from 0 to 2,000, got nan"),
    (dict(carbon_intensity="300"), "carbon_intensity: must be gCO2e a kWh"),
    (dict(pue=0.9), "pue: must be a number from 1 to 3, or one of average, hyperscale, got 0.9"),
    (dict(pue="cold"), "pue: must be a number from 1 to 3, or one of average, hyperscale, got 'cold'"),
    (dict(pue=True), "pue: must be a number"),
])
def test_a_bad_grid_or_pue_is_one_line_naming_it(kw, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        grid_at(**kw)


def test_a_table_of_estimates_gets_its_carbon_columns():
    import pandas as pd

    rows = joulecast.estimate_many(pd.DataFrame({"model": ["gpt2"] * 2, "gpu": ["a10", "h200"], "batch": [1, 8],
                                                 "seq": [128, 128]}), estimator="physics")
    out = joulecast.carbon(rows, "IN", pue=1.0)
    assert list(out["grid"]) == ["IN", "IN"] and len(out) == 2
    india = reference("grid_carbon")["g_per_kwh"]["IN"]
    assert out["carbon_g"].to_numpy() == pytest.approx(rows["energy_j"].to_numpy() * india / 3.6e6)


def test_carbon_of_what_is_no_estimate_is_one_line():
    with pytest.raises(InputError, match=r"estimate: an estimate \(joulecast.estimate, .* got text \('gpt2'\)"):
        carbon("gpt2")


def test_the_cli_prints_the_carbon_of_every_phase_and_refuses_a_bad_grid_before_estimating(capsys):
    base = ["estimate", "--model", "gpt2", "--gpu", "a10", "--estimator", "physics"]
    assert main([*base, "--grid", "FR", "--pue", "1.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["carbon_g"] == pytest.approx(out["energy_j"] * 56 * 1.2 / 3.6e6) and out["carbon"]["grid"] == "FR"
    # the shipped model's serving estimate of GPT-2 on an A10 is flagged out-of-domain: the carbon comes before it
    assert main(["estimate", "--model", "gpt2", "--gpu", "a10", "--phase", "serve", "--input-len", "32",
                 "--output-len", "8", "--concurrency", "4", "--carbon-intensity", "100", "--pue", "hyperscale"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("carbon"))
    assert "CO2e a million output tokens" in lines[at] and "at 100 g/kWh (given) x PUE 1.1" in lines[at]
    assert lines[at + 1].startswith("flag       out-of-domain")
    assert main([*base, "--phase", "train-run", "--seq", "64", "--global-batch", "4", "--steps", "3"]) == 0
    assert "(WORLD annual average) x PUE 1.58: the GPU's energy alone" in capsys.readouterr().out
    assert main([*base, "--grid", "XX"]) == 2
    assert capsys.readouterr().err.strip().startswith("joulecast: error: --grid: unknown 'XX'")
