"""Requests files: joulecast's own columns and the public serving traces as published (`data.requests`)."""

import json
import re

import numpy as np
import pandas as pd
import pytest

import joulecast
from joulecast.cli import main
from joulecast.data.requests import FORMATS, read_requests, requests_from_rows

AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n"
         "2023-11-16 18:15:56.6805900,879,55\n")


def test_each_public_trace_reads_as_published(tmp_path):
    """Azure's datetimes, BurstGPT's seconds (a failure row asking no answer left out and counted), Mooncake's JSON
    lines in milliseconds, OpenAI usage objects without times, and joulecast's own columns with arrival_s."""
    files = {
        "azure.csv": AZURE,
        "burst.csv": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                      "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n"
                      "25,GPT-4,417,276,693,Conversation log\n"),
        "mooncake.jsonl": "\n".join(json.dumps(r) for r in (
            {"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [1, 2]},
            {"timestamp": 1500, "input_length": 100, "output_length": 4, "hash_ids": []},
            {"timestamp": 4000, "input_length": 3000, "output_length": 10, "hash_ids": [3]})) + "\n",
        "usage.json": json.dumps([{"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42},
                                  {"prompt_tokens": 8, "completion_tokens": 2.0e1, "total_tokens": 28}]),
        "own.csv": "input_len,output_len,arrival_s\n100,10,0.5\n300,30,2.5\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    azure, burst, moon, usage, own = (read_requests(tmp_path / n) for n in files)
    assert [t.format for t in (own, azure, burst, moon, usage)] == [f.name for f in FORMATS]
    assert azure.pairs() == [[374, 44], [396, 109], [879, 55]] and azure.span_s == pytest.approx(10.0)
    assert azure.request_rate == pytest.approx(2 / 10.0) and azure.left_out == 0
    assert burst.pairs() == [[472, 18], [417, 276]] and burst.left_out == 1
    assert burst.arrival_s.tolist() == [0.0, 20.0] and burst.request_rate == pytest.approx(1 / 20)
    assert moon.pairs() == [[6955, 52], [100, 4], [3000, 10]] and moon.span_s == pytest.approx(4.0)
    assert usage.pairs() == [[12, 30], [8, 20]] and usage.arrival_s is None and usage.request_rate is None
    assert own.request_rate == pytest.approx(0.5)
    load = own.load()
    assert load == pytest.approx({"input_len": 200.0, "output_len": 20.0, "input_len_cv": 0.5, "output_len_cv": 0.5})


@pytest.mark.parametrize("name, text, field, message", [
    ("a.csv", "input_len,output_len\n10,5\n10,2.5\n", "--requests row 2", "output_len must be a whole number"),
    ("a.csv", "input_len,output_len\n0,5\n", "--requests row 1", "input_len must be a whole number from 1"),
    ("a.csv", AZURE.replace("2023-11-16 18:15:50.9951690", "yesterday"), "--requests row 2",
     "TIMESTAMP must be a date and time, got 'yesterday'"),
    ("a.jsonl", '{"input_length": 1, "output_length": 2}\n{"input_length": 1,\n', "--requests",
     "not JSON lines (Expecting property name enclosed in double quotes, line 2)"),
    ("a.json", '[{"input_len": 5, "output_len": true}]', "--requests row 1", "output_len must be a whole number"),
    ("a.json", '{"input_len": 5}', "--requests", "a list of requests, got a mapping"),
    ("a.csv", "input_len,output_len\n10,0\n", "--requests", "every request asks no output token"),
    ("a.csv", "prompt,answer\n10,5\n", "--requests", "needs a prompt and an answer length a request"),
    ("a.csv", "", "--requests", "holds no requests"),
])
def test_a_bad_requests_file_is_one_line_naming_the_row(tmp_path, name, text, field, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(joulecast.InputError) as caught:
        read_requests(tmp_path / name)
    assert caught.value.field == field and message in str(caught.value), caught.value


def test_serve_takes_a_trace_s_load_and_a_load_given_beside_it(tmp_path, capsys):
    """`serve --requests`: the trace's mean lengths, their spread and its arrival rate, the same figures as the API
    given them; --concurrency or --request-rate in place of its rate; its lengths are the file's alone."""
    (tmp_path / "azure.csv").write_text(AZURE)
    trace = joulecast.read_requests(tmp_path / "azure.csv")  # the API of it: its load given to serve
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--estimator", "physics",
            "--requests", str(tmp_path / "azure.csv")]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    api = joulecast.serve("llama-3-8b", "h100-sxm", request_rate=trace.request_rate, estimator="physics",
                          **trace.load())
    assert out["energy_per_output_token_j"] == pytest.approx(api.energy_per_output_token_j)
    # totalled over the file's work where no --duration or --output-tokens says otherwise: its 208 output tokens,
    # in about its span at its rate
    assert out["output_tokens"] == 208 and out["energy_j"] == pytest.approx(208 * out["energy_per_output_token_j"])
    assert out["duration_s"] == pytest.approx(3 / trace.request_rate)
    assert out["trace"]["format"] == "Azure LLM inference trace" and out["trace"]["requests"] == 3
    assert main([*argv, "--concurrency", "8", "--json"]) == 0
    eight = json.loads(capsys.readouterr().out)
    api = joulecast.serve("llama-3-8b", "h100-sxm", concurrency=8, estimator="physics", **trace.load())
    assert eight["energy_per_output_token_j"] == pytest.approx(api.energy_per_output_token_j)
    assert main(argv) == 0
    assert any(line.startswith("file       ") and "3 requests over 10.00 s, 0.2 a second" in line
               for line in capsys.readouterr().out.splitlines())
    assert main([*argv, "--input-len", "512"]) == 2
    assert "--input-len: has no effect with --phase serve (give --requests alone" in capsys.readouterr().err
    (tmp_path / "usage.json").write_text('[{"prompt_tokens": 12, "completion_tokens": 30}]')
    assert main([*argv[:-1], str(tmp_path / "usage.json")]) == 2
    assert "--request-rate: " in capsys.readouterr().err


def test_a_serving_sweep_takes_a_trace_s_load(tmp_path, capsys):
    """`sweep --phase serve --requests`: every point at the file's load (mean lengths to the whole token, their
    spread, its rate), the points `joulecast.sweep` gives that load; a length beside the file, or the file with
    another phase, is refused by name."""
    (tmp_path / "azure.csv").write_text(AZURE)
    trace = joulecast.read_requests(tmp_path / "azure.csv")
    argv = ["sweep", "--model", "llama-3-8b", "--phase", "serve", "--gpu", "h100-sxm,a100-sxm4-80gb",
            "--estimator", "physics", "--requests", str(tmp_path / "azure.csv")]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    load = trace.load()
    api = joulecast.sweep("llama-3-8b", ["h100-sxm", "a100-sxm4-80gb"], phase="serve", estimator="physics",
                          request_rate=trace.request_rate, input_len=550, output_len=69,
                          input_len_cv=load["input_len_cv"], output_len_cv=load["output_len_cv"])
    assert [p["energy_per_token_j"] for p in out["points"]] == pytest.approx(
        api.points["energy_per_token_j"].tolist())
    assert out["trace"]["requests"] == 3 and {p["request_rate"] for p in out["points"]} == {0.2}
    given = joulecast.sweep("llama-3-8b", ["h100-sxm", "a100-sxm4-80gb"], phase="serve", estimator="physics",
                            requests=trace)  # the API takes the file read (or its rows) as the CLI does
    assert given.points["energy_per_token_j"].tolist() == pytest.approx(api.points["energy_per_token_j"].tolist())
    with pytest.raises(joulecast.InputError, match="^input_len: not with requests"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", requests=trace, input_len=512)
    assert main([*argv, "--report", str(tmp_path / "report")]) == 0  # the report says the load it was read as
    page = (tmp_path / "report" / "report.html").read_text()
    assert "The load read from Azure LLM inference trace: 3 requests over 10.00 s, 0.2 a second" in page
    capsys.readouterr()
    assert main([*argv, "--concurrency", "4,16", "--json"]) == 0
    assert sorted(p["concurrency"] for p in json.loads(capsys.readouterr().out)["points"]) == [4, 4, 16, 16]
    assert main([*argv, "--input-len", "512"]) == 2
    assert "--input-len: has no effect with --requests" in capsys.readouterr().err
    argv[argv.index("serve")] = "generate"
    assert main([*argv, "--input-len", "512", "--output-len", "8"]) == 2
    assert "--requests: has no effect with --phase generate" in capsys.readouterr().err


def test_a_bursty_trace_names_its_busiest_hour_and_where_it_is_past_what_serves_it(tmp_path, capsys):
    """A trace of two hours or more counts its busiest whole hour (`peak_hour_rate`); served at its mean rate, the
    CLI says so, and where that hour is past what the instances serve, a note names it with the instances that
    would (the figures stay the mean's)."""
    starts = np.concatenate([np.linspace(0, 3599, 100), np.linspace(3600, 7199, 18_000),
                             np.linspace(7200, 10_799, 100)])  # hours from the first arrival
    rows = pd.DataFrame({"input_len": 1000, "output_len": 150, "arrival_s": np.sort(starts)})
    rows.to_csv(tmp_path / "bursty.csv", index=False)
    trace = joulecast.read_requests(tmp_path / "bursty.csv")
    assert trace.peak_hour_rate == pytest.approx(18_000 / 3600) and trace.request_rate < 2
    assert trace.to_dict()["peak_hour_rate"] == trace.peak_hour_rate
    assert requests_from_rows([[5, 2], [6, 3]]).peak_hour_rate is None  # no times
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "l4", "--phase", "serve", "--engine", "vllm-0.5.4",
            "--estimator", "physics", "--requests", str(tmp_path / "bursty.csv")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "(its busiest hour 5, 3x)" in out
    assert re.search(r"^joulecast: note: at the mean rate; its busiest hour, 5 requests/s is beyond .* \(at least "
                     r"\d+ instances of this size for the rate\); --window 1h prices each hour at its own rate$",
                     err.strip())
    assert main([*argv, "--instances", "4"]) == 0 and "note" not in capsys.readouterr().err


def test_a_trace_s_arrivals_counted_window_by_window(tmp_path):
    """`windows`: arrivals a second in each window from the first arrival, the last arrival in the last window (as
    long as the file runs into it), every request in one; a window longer than the file, shorter than a minute, too
    many windows, or a file without times, is one line naming the field."""
    rows = pd.DataFrame({"input_len": 10, "output_len": 5, "arrival_s": [100.0, 150.0, 700.0, 705.0, 710.0, 1300.0]})
    rows.to_csv(tmp_path / "own.csv", index=False)
    trace = read_requests(tmp_path / "own.csv")
    # from the first arrival: 0, 50, 600, 605, 610 and 1,200 s, the last in the last window
    rates, last = trace.windows(600)
    assert rates.tolist() == pytest.approx([2 / 600, 4 / 600]) and last == 600
    rates, last = trace.windows(400)
    assert rates.tolist() == pytest.approx([2 / 400, 3 / 400, 1 / 400]) and last == 400
    # a last window the file runs partly into: as long as it runs; a sliver under a minute joins the one before
    rates, last = trace.windows(500)  # 0-500, 500-1,000, 1,000-1,200 s
    assert rates.tolist() == pytest.approx([2 / 500, 3 / 500, 1 / 200]) and last == 200
    rates, last = trace.windows(590)  # 0-590, 590-1,180, then 20 s: joined, 590-1,200 s
    assert rates.tolist() == pytest.approx([2 / 590, 4 / 610]) and last == 610
    load = trace.serving(window_s=500)
    assert load["window_s"] == 500 and load["last_window_s"] == 200 and "request_rate" not in load
    assert np.dot(load["window_rates"], [500, 500, 200]) == pytest.approx(6)  # every request in a window
    for window, message in ((1200.5, "to the requests' span, 1,200 s, got 1200.5"), (59, "must be seconds from 60"),
                            (float("nan"), "must be seconds from 60"), (True, "must be seconds from 60")):
        with pytest.raises(joulecast.InputError, match="^window_s: ") as refused:
            trace.windows(window)
        assert message in str(refused.value)
    with pytest.raises(joulecast.InputError, match="^request_rate: not with a window"):
        trace.serving(window_s=600, request_rate=1.0)
    with pytest.raises(joulecast.InputError, match="^window_s: the requests have no arrival times"):
        requests_from_rows([[5, 2], [6, 3]]).windows(600)
    short = requests_from_rows([{"input_len": 5, "output_len": 2, "arrival_s": t} for t in (0, 30)])
    with pytest.raises(joulecast.InputError, match="^window_s: the requests arrive within 30 s, under the shortest"):
        short.windows(60)
    far = requests_from_rows([{"input_len": 5, "output_len": 2, "arrival_s": t} for t in (0, 1e9)])
    with pytest.raises(joulecast.InputError, match="^window_s: 60 s over the requests' 1,000,000,000 s is "
                                                   "16,666,667 windows, more than 1,000,000; give at least 1,000 s"):
        far.windows(60)
    assert len(far.windows(1000)[0]) == 1_000_000


def test_serve_prices_a_trace_window_by_window(tmp_path, capsys):
    """`estimate --phase serve --requests FILE --window S`: the API's windowed serving of the file's load (each
    window's rate and lengths); the table names the busiest window by its UTC time and draws the power's profile;
    its carbon on an hourly series weighs each window's energy by its hour's intensity."""
    stamps = pd.Timestamp("2024-05-12T00:00:00Z") + pd.to_timedelta(
        np.concatenate([np.linspace(0, 3599, 900), np.linspace(3600, 7199, 9000), np.linspace(7200, 10_799, 90)]),
        unit="s")
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": 800,
                  "GeneratedTokens": 200}).to_csv(tmp_path / "azure.csv", index=False)
    trace = joulecast.read_requests(tmp_path / "azure.csv")
    assert trace.to_dict()["first_arrival"] == "2024-05-12T00:00:00Z"
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--engine", "vllm-0.5.4",
            "--estimator", "physics", "--requests", str(tmp_path / "azure.csv"), "--window", "3600"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    api = joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", estimator="physics",
                          **trace.serving(window_s=3600))
    assert out["energy_j"] == pytest.approx(api.energy_j) and out["windows"]["request_rate"] == pytest.approx(
        [0.25, 2.5, 90 / 3599])  # the last hour as long as the file runs into it
    assert out["windows"]["duration_s"] == pytest.approx([3600, 3600, 3599])
    assert out["output_tokens"] == pytest.approx(9990 * 200) and out["duration_s"] == pytest.approx(10_799)
    # bursts cost what their batches draw: the mean rate, served steady, prices the same tokens otherwise
    mean = joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", estimator="physics",
                           **trace.serving())
    assert mean.output_tokens == out["output_tokens"] and mean.energy_j != pytest.approx(out["energy_j"], rel=0.01)
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert re.search(r"^windows    3 windows of 60\.00 min \(the last 59\.98 min\), each served at its own arrival "
                     r"rate: busiest 2\.5 requests/s \(from 2024-05-12T01:00:00Z\) at [\d.]+ W$", table, re.M), table
    profile = next(line for line in table.splitlines() if line.startswith("profile"))
    assert profile.split()[1][1] == "█" and "(a window)" in profile  # the busy hour's bar the highest
    (tmp_path / "series.csv").write_text("g_per_kwh\n100\n500\n100\n")
    assert main([*argv, "--carbon-series", str(tmp_path / "series.csv"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    energy = np.array(out["windows"]["energy_j"])
    expected = energy / 3.6e6 * out["carbon"]["pue"] * np.array([100, 500, 100])
    assert out["window_carbon_g"] == pytest.approx(expected.tolist()) and out["carbon_g"] == pytest.approx(
        expected.sum())
    assert out["carbon"]["g_per_kwh"] > 300  # the busy hour's intensity weighs most, not the series' mean (233)
    # a window as people write one: 1h is 3600 s
    assert main([*argv[:-1], "1h", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["energy_j"] == pytest.approx(api.energy_j)
    with pytest.raises(SystemExit) as refused:  # argparse's type check: exit 2, one line naming the flag
        main([*argv[:-1], "1week"])
    assert refused.value.code == 2 and "argument --window: '1week' is not a time" in capsys.readouterr().err
    for extra, message in ((["--request-rate", "2"], "--request-rate: not with a window"),
                           (["--duration", "60"], "--duration: not with a window"),
                           (["--window", "30"], "--window: must be seconds from 60")):
        assert main([*argv, *extra]) == 2
        assert message in capsys.readouterr().err
    assert main([*argv[:-4], "--input-len", "64", "--output-len", "16", "--request-rate", "1", "--window",
                 "600"]) == 2
    assert "--window: applies to --requests" in capsys.readouterr().err
    # autoscaled over 4 instances: each hour the fewest that serve it, the table saying how many
    assert main([*argv, "--instances", "4", "--autoscale"]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^autoscale  1 - 1 of 4 instances serving by window \(1 on average; 3 instance-hours of the 12 "
                     r"the whole fleet would run\)$", table, re.M), table
    assert main([*argv[:-2], "--autoscale"]) == 2
    assert "--autoscale: applies to --window" in capsys.readouterr().err
    # its spares off, each started again paying --cold-start, or idle and loaded; --headroom over each hour's rate
    scaled = ["--instances", "4", "--autoscale", "--max-batch", "2"]
    assert main([*argv, *scaled, "--cold-start", "2min", "--headroom", "25%", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    api = joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", estimator="physics", instances=4,
                          autoscale=True, max_batch=2, cold_start_s=120, headroom=0.25, **trace.serving(window_s=3600))
    assert out["energy_j"] == pytest.approx(api.energy_j) and out["cold_start_s"] == 120 and out["headroom"] == 0.25
    assert out["windows"]["started"] == api.windows.started.tolist() and sum(out["windows"]["started"]) > 0
    assert main([*argv, *scaled, "--cold-start", "2min"]) == 0
    assert re.search(r"^ {11}the others off; \d starts of 2\.000 min at idle power: [\d.]+ kWh \([\d.]+ % of the "
                     r"energy\)$", capsys.readouterr().out, re.M)
    assert main([*argv, *scaled, "--ttft-target", "1s", "--ttft-p99-target", "3s"]) == 0
    assert re.search(r"^ {11}a first token within 1\.000 s on average and 99 % of first tokens within 3\.000 s in \d "
                     r"of 3 windows with arrivals", capsys.readouterr().out, re.M)
    assert main([*argv, *scaled, "--itl-p99-target", "0.5s", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["itl_p99_target_s"] == 0.5 and max(out["windows"]["itl_p99_s"]) <= 0.5
    # sized by the hour before: the instances a shift of those sized ahead (the first hour its own)
    ahead = json.loads(capsys.readouterr().out) if main([*argv, *scaled, "--json"]) == 0 else None
    assert main([*argv, *scaled, "--reactive", "--queue", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reactive"] is True and out["windows"]["instances"] == [ahead["windows"]["instances"][0],
                                                                        *ahead["windows"]["instances"][:-1]]
    assert main([*argv, "--reactive"]) == 2 and "--reactive: applies to --autoscale" in capsys.readouterr().err
    assert main([*argv, *scaled, "--spare", "idle"]) == 0
    assert re.search(r"^ {11}the others idle, loaded: [\d.]+ kWh \([\d.]+ % of the energy\)$",
                     capsys.readouterr().out, re.M)
    for extra, message in ((["--cold-start", "60"], "--cold-start: applies to --autoscale"),
                           (["--ttft-target", "1"], "--ttft-target: applies to --autoscale"),
                           ([*scaled, "--spare", "idle", "--cold-start", "60"],
                            "--cold-start: applies where spare instances are off"),
                           ([*scaled, "--headroom", "20"], "--headroom: must be a number from 0 to 10")):
        assert main([*argv, *extra]) == 2
        assert message in capsys.readouterr().err
    # one instance for a busy hour past it: refused, or its excess queued for the hours after it
    assert main([*argv, "--max-batch", "2"]) == 2
    assert "or let its excess wait for the windows after it (queue)" in capsys.readouterr().err
    assert main([*argv, "--max-batch", "2", "--queue", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queue"] and out["windows"]["backlog"][1] > 0 and out["wait_s"] > 0
    assert out["output_tokens"] == pytest.approx(9990 * 200)  # every request served
    assert main([*argv, "--max-batch", "2", "--queue", "--report", str(tmp_path / "queued")]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^queue      2 of 3 windows end with requests waiting \(at most [\d,.]+\); a request waits ",
                     table, re.M), table
    assert "<rect class='queue'" in (tmp_path / "queued" / "report.html").read_text()
    assert main([*argv[:-2], "--queue"]) == 2
    assert "--queue: applies to --window" in capsys.readouterr().err


def test_a_trace_s_lengths_window_by_window(tmp_path, capsys):
    """`window_lengths`: each window's requests' mean lengths and spread, as `load` reads a file of them alone (NaN
    for a window without arrivals), which pooled are the file's own; `serving(window_s=...)` hands them to `serve`,
    whose table gives their range, --out a column of each and --report a chart of the prompts; a sweep's points
    price them too."""
    from joulecast.estimator.serve_windows import pooled

    rng = np.random.default_rng(3)
    arrivals = np.concatenate([rng.uniform(0, 600, 200), rng.uniform(1200, 1800, 100)])
    ins = np.where(arrivals < 600, rng.integers(100, 300, 300), rng.integers(2000, 6000, 300))
    outs = np.where(arrivals < 600, rng.integers(10, 50, 300), rng.integers(200, 600, 300))
    rows = pd.DataFrame({"input_len": ins, "output_len": outs, "arrival_s": arrivals})
    rows.to_csv(tmp_path / "two.csv", index=False)
    trace = read_requests(tmp_path / "two.csv")
    lengths = trace.window_lengths(600)
    assert list(lengths.columns) == ["input_len", "output_len", "input_len_cv", "output_len_cv"]
    assert len(lengths) == len(trace.windows(600)[0]) and lengths.iloc[1].isna().all()  # 600-1,200 s: none
    start = arrivals.min()
    for k in (0, 2):
        mine = rows[np.minimum((arrivals - start) // 600, len(lengths) - 1) == k]
        alone = requests_from_rows(mine[["input_len", "output_len"]].values.tolist()).load()
        assert lengths.iloc[k].to_dict() == pytest.approx(alone, rel=1e-12)
    requests = trace.windows(600)[0] * np.array([600, 600, trace.windows(600)[1]])
    busy = requests > 0
    whole = pooled(lengths.to_numpy()[busy], requests[busy], np.zeros(2, dtype=np.int64), 1)[0]
    assert dict(zip(lengths.columns, whole)) == pytest.approx(trace.load(), rel=1e-9)
    load = trace.serving(window_s=600)
    assert set(load) == {"window_rates", "window_s", "last_window_s", "window_lengths"}
    job = joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", estimator="physics", **load)
    assert job.input_len == pytest.approx(ins.mean()) and job.output_tokens == pytest.approx(outs.sum())
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--engine", "vllm-0.5.4",
            "--estimator", "physics", "--requests", str(tmp_path / "two.csv"), "--window", "600"]
    assert main([*argv, "--out", str(tmp_path / "w.csv")]) == 0
    table = capsys.readouterr().out
    line = next(line for line in table.splitlines() if line.startswith("lengths"))
    shown = lengths.dropna()
    prompts, answers = shown.input_len, shown.output_len
    assert line == (f"lengths    by window, a request's mean: {prompts.min():.4g} - {prompts.max():,.0f} tokens in, "
                    f"{answers.min():.4g} - {answers.max():.4g} out")
    out = pd.read_csv(tmp_path / "w.csv")
    assert out["input_len"].iloc[[0, 2]].tolist() == pytest.approx(lengths.input_len.iloc[[0, 2]].tolist())
    assert main([*argv, "--report", str(tmp_path / "report")]) == 0  # a chart of the prompts, a bar a window
    page = (tmp_path / "report" / "report.html").read_text()
    assert page.count("<rect class='prompt'") == len(lengths) and "<th>prompt (tokens)</th>" in page
    # a sweep's point: the file's windows at their own lengths, as `serve` prices them; its seq the file's mean
    result = joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", estimator="physics", engine="vllm-0.5.4",
                             requests=trace, window_s=600)
    point = result.points.iloc[0]
    assert point.energy_per_token_j == pytest.approx(job.energy_per_output_token_j, rel=1e-12)
    assert point.input_len == round(ins.mean()) and "window_lengths" not in result.job
    with pytest.raises(joulecast.InputError, match="^window_lengths: not with requests"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", requests=trace, window_s=600,
                        window_lengths=lengths)
    with pytest.raises(joulecast.InputError, match="^window_lengths: a sweep takes each window's lengths from its "
                                                   "requests"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", input_len=64, output_len=16, window_rates=[1.0],
                        window_s=600, window_lengths=lengths.iloc[:1])


def test_a_serving_sweep_takes_a_trace_window_by_window():
    """A sweep's `window_s` beside its requests: each point the trace's windows (as `serve` gives them), its carbon
    on an hourly series by its windows' hours, the result naming how many windows (not their rates); rates beside
    requests, or beside a concurrency, named."""
    rows = [{"input_len": 600, "output_len": 100, "arrival_s": float(t)} for t in np.linspace(0, 1199, 600)]
    rows += [{"input_len": 600, "output_len": 100, "arrival_s": float(t)} for t in np.linspace(1200, 2399, 60)]
    trace = requests_from_rows(rows)
    result = joulecast.sweep("llama-3-8b", ["h100-sxm", "a100-sxm4-80gb"], phase="serve", estimator="physics",
                             engine="vllm-0.5.4", requests=trace, window_s=1200)
    assert result.job["windows"] == 2 and result.job["window_s"] == 1200 and "window_rates" not in result.job
    for point in result.points.itertuples():
        one = joulecast.serve("llama-3-8b", point.gpu, engine="vllm-0.5.4", estimator="physics",
                              **trace.serving(window_s=1200))
        assert point.energy_per_token_j == pytest.approx(one.energy_per_output_token_j)
        assert point.request_rate == pytest.approx(660 / 2399)  # arrivals over the file's span
    # on an hourly series, each point's carbon weighs its own windows' energy by their hours, as `serve`'s does
    for series in ([100, 500], [500, 100]):
        on_series = joulecast.sweep("llama-3-8b", ["h100-sxm", "a100-sxm4-80gb"], phase="serve", estimator="physics",
                                    engine="vllm-0.5.4", requests=trace, window_s=1200, carbon_series=series)
        for point in on_series.points.itertuples():
            one = joulecast.serve("llama-3-8b", point.gpu, engine="vllm-0.5.4", estimator="physics",
                                  **trace.serving(window_s=1200))
            said = joulecast.carbon(one, carbon_series=series)
            assert point.g_per_kwh == pytest.approx(said["carbon"]["g_per_kwh"])
            assert point.carbon_per_token_g == pytest.approx(said["carbon_per_output_token_g"])
    assert series == [500, 100] and point.g_per_kwh > 300  # the busy window's hour weighs most
    # a GPU that cannot serve the busy window: past capacity, or with its excess queued, as `serve` queues it
    burst = requests_from_rows([{"input_len": 600, "output_len": 100, "arrival_s": float(t)}
                                for t in (*np.linspace(0, 1799, 6000), *np.linspace(1800, 3599, 60))])
    small = dict(phase="serve", estimator="physics", engine="vllm-0.5.4", requests=burst, window_s=1800, max_batch=1)
    assert joulecast.sweep("llama-3-8b", "h100-sxm", **small).points["flags"].iloc[0] == "exceeds-capacity"
    queued = joulecast.sweep("llama-3-8b", "h100-sxm", **small, queue=True).points.iloc[0]
    one = joulecast.serve("llama-3-8b", "h100-sxm", engine="vllm-0.5.4", estimator="physics", max_batch=1,
                          queue=True, **burst.serving(window_s=1800))
    assert queued.feasible and queued.energy_per_token_j == pytest.approx(one.energy_per_output_token_j)
    assert queued.wait_s == pytest.approx(one.wait_s) and one.wait_s > 0  # the points' wait column, serve's
    # its carbon on an hourly series over its windows' hours, the drain its last window runs on for included
    assert one.windows.duration_s[-1] > 1800 + 600  # its backlog served into the second hour
    hourly = joulecast.sweep("llama-3-8b", "h100-sxm", **small, queue=True, carbon_series=[100, 500])
    said = joulecast.carbon(one, carbon_series=[100, 500])
    assert hourly.points.g_per_kwh.iloc[0] == pytest.approx(said["carbon"]["g_per_kwh"])
    assert said["carbon"]["g_per_kwh"] > 100  # the drain's hour weighs in
    for given in ({"window_rates": [1.0]}, {"last_window_s": 100}):
        with pytest.raises(joulecast.InputError, match=f"^{next(iter(given))}: not with requests"):
            joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", requests=trace, window_s=600, **given)
    with pytest.raises(joulecast.InputError, match="^window_rates: the load window by window: give no concurrency"):
        joulecast.sweep("llama-3-8b", "h100-sxm", phase="serve", input_len=64, output_len=16, concurrency=4,
                        window_rates=[1.0], window_s=600)


def test_a_trace_served_window_by_window_charted_in_a_report(tmp_path, capsys):
    """`--report DIR` beside `--window`: a self-contained page with a bar a window of its power and arrivals (its
    instances where autoscaled, its carbon on an hourly series), the busiest windows by their UTC times; a real
    browser draws it where one is installed. `--out FILE`: a row a window. Without --window, one line naming the
    flag."""
    import shutil
    import subprocess

    stamps = pd.Timestamp("2024-05-12T00:00:00Z") + pd.to_timedelta(
        np.concatenate([np.linspace(0, 3599, 300), np.linspace(3600, 7199, 3000), np.linspace(7200, 10_799, 30)]),
        unit="s")
    pd.DataFrame({"TIMESTAMP": stamps.strftime("%Y-%m-%d %H:%M:%S.%f"), "ContextTokens": 800,
                  "GeneratedTokens": 200}).to_csv(tmp_path / "azure.csv", index=False)
    (tmp_path / "series.csv").write_text("g_per_kwh\n100\n500\n100\n")
    argv = ["estimate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--phase", "serve", "--engine", "vllm-0.5.4",
            "--estimator", "physics", "--requests", str(tmp_path / "azure.csv"), "--window", "900"]
    report = tmp_path / "report"
    assert main([*argv, "--instances", "2", "--autoscale", "--carbon-series", str(tmp_path / "series.csv"),
                 "--report", str(report)]) == 0
    assert f"wrote {report / 'report.html'}" in capsys.readouterr().out
    page = (report / "report.html").read_text()
    assert page.count("<svg") == 6 and "<script" not in page
    for cls in ("power", "rate", "instances", "carbon"):
        assert page.count(f"<rect class='{cls}'") == 12, cls  # a bar a window: 3 hours of 15 minutes
    # each window's 99th percentiles of its first tokens and of its gaps between tokens, a chart each
    assert page.count("<rect class='latency'") == 24
    assert "99 % of first tokens within (s)" in page and "99 % of gaps between tokens within (s)" in page
    busiest = page.split("<table class='busiest'>", 1)[1]
    assert busiest.count("<tr>") == 1 + 10 and "<td>2024-05-12T01:00:00Z</td>" in busiest
    # each window's mean first token (its prompt's prefill and its wait for a slot) and its 99th percentile
    assert "<th>first token (s)</th>" in busiest and "<th>99 % first token (s)</th>" in busiest
    assert "<th>99 % gap between tokens (s)</th>" in busiest
    # reactive, its starts loading within windows: the instances running beside those serving
    assert main([*argv, "--instances", "4", "--autoscale", "--headroom", "10", "--reactive", "--reaction", "5min",
                 "--cold-start", "5min", "--queue", "--report", str(tmp_path / "reactive")]) == 0
    page = (tmp_path / "reactive" / "report.html").read_text()
    assert "instances running (serving or starting)" in page and page.count("<rect class='instances'") == 24
    assert "of them serving on average, the rest starting" in capsys.readouterr().out
    assert main([*argv[:-2], "--report", str(tmp_path / "other")]) == 2
    assert "--report: applies to --window" in capsys.readouterr().err and not (tmp_path / "other").exists()
    # --out: a row a window, its UTC start, figures and carbon, summing to the estimate's
    assert main([*argv, "--carbon-series", str(tmp_path / "series.csv"), "--out", str(tmp_path / "w.csv"),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = pd.read_csv(tmp_path / "w.csv")
    assert len(rows) == 12 and rows["start_utc"].iloc[4] == "2024-05-12T01:00:00Z"
    assert rows["energy_j"].sum() == pytest.approx(out["energy_j"]) and rows["carbon_g"].sum() == pytest.approx(
        out["carbon_g"])
    assert main([*argv[:-2], "--out", str(tmp_path / "v.csv")]) == 2
    assert "--out: applies to --window" in capsys.readouterr().err and not (tmp_path / "v.csv").exists()
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed: the report was checked as text only")
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'chromium'}", "--dump-dom", (report / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<svg") == 6 and dom.count('class="power"') == 12
