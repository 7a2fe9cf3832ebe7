import copy
import math
import re

import pytest
import yaml

from joulecast.data import gpus
from joulecast.data.errors import DataError, InputError

REQUIRED = ["v100-sxm2", "v100-pcie-16gb", "a10", "a100-pcie-40gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "l4", "l40s", "h100-sxm",
            "h100-pcie", "h200", "gh200", "b200"]


def test_catalog_has_the_required_gpus_with_sources():
    cat = gpus.catalog()
    assert set(REQUIRED) <= set(cat)
    for spec in cat.values():
        assert "bf16" in spec.tensor_tflops or spec.architecture == "volta"
        assert spec.sources["sm_count"] and spec.sources["power_limit_w"]


def test_datasheet_numbers_copied_from_reference():
    a100 = gpus.gpu("a100-pcie-40gb")
    assert (a100.sm_count, a100.memory_bandwidth_gbs, a100.tensor_tflops["bf16"], a100.power_limit_w) == (108, 1555, 312, 250)
    h100 = gpus.gpu("h100-sxm")
    assert h100.tensor_tflops["bf16"] == 989.4 and h100.tensor_peak_clock_mhz == 1830 and h100.sm_count == 132


def test_the_v100_pcie_card_is_the_sxm2_die_at_its_own_clock_limit_and_memory():
    """The PCIe card (the label NV-DVFS-Benchmark's importer gives its V100, `v100-pcie`) carries the SXM2's GV100 at
    1,380 MHz under 250 W: its peaks are the SXM2's scaled by the clock, its memory system the same."""
    pcie, sxm2 = gpus.gpu("v100-pcie"), gpus.gpu("v100-sxm2")
    assert pcie.name == "v100-pcie-16gb"
    assert (pcie.power_limit_w, pcie.memory_gb, pcie.boost_clock_mhz) == (250, 16, 1380)
    scale = pcie.boost_clock_mhz / sxm2.boost_clock_mhz
    assert pcie.cuda_tflops["fp32"] == pytest.approx(sxm2.cuda_tflops["fp32"] * scale, rel=0.01)
    assert pcie.tensor_tflops["fp16"] == pytest.approx(sxm2.tensor_tflops["fp16"] * scale, rel=0.01)
    same = ("sm_count", "l2_mb", "memory_bandwidth_gbs", "memory_clock_mhz", "architecture")
    assert [getattr(pcie, k) for k in same] == [getattr(sxm2, k) for k in same]


def test_the_gh200s_idle_at_its_maximum_clock_rises_by_the_watts_its_die_rises_on_the_h100_and_h200():
    """GH200's GPU is the GH100 die of the H100-SXM and the H200 (132 SMs, 1,980 MHz): its idle at the maximum clock
    is its own idle plus the watts those boards rise by (46.5 and 49 W), not 1.5x its idle (120 W)."""
    gh200, h100, h200 = (gpus.gpu(n) for n in ("gh200", "h100-sxm", "h200"))
    assert (gh200.sm_count, gh200.boost_clock_mhz) == (h100.sm_count, h100.boost_clock_mhz) == (
        h200.sm_count, h200.boost_clock_mhz)
    rise = [g.idle_power_max_clock_w - g.idle_power_w for g in (h100, h200)]
    assert rise == pytest.approx([46.5, 49.0])
    assert gh200.idle_power_max_clock_w == pytest.approx(gh200.idle_power_w + sum(rise) / 2, abs=0.5)
    assert gh200.idle_power_max_clock_w > gh200.idle_power_w * gpus.IDLE_MAX_CLOCK_RATIO


def test_lookup_by_alias_is_case_insensitive():
    assert gpus.gpu("A100").name == "a100-pcie-40gb"
    assert gpus.gpu("H100-SXM5").name == "h100-sxm"


@pytest.mark.parametrize("reported, name", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"), ("NVIDIA A10", "a10"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"), ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"), ("H100 PCIe", "h100-pcie"),
    ("nvidia_h200", "h200"),
])
def test_a_gpu_is_found_by_the_name_nvidia_smi_gives_it(reported, name):
    """nvidia-smi's and NVML's names, spaces and a maker's word included, are the catalog's written otherwise."""
    assert gpus.gpu(reported).name == name


@pytest.mark.parametrize("other", ["NVIDIA H100 NVL", "NVIDIA H200 NVL", "Tesla V100-SXM2-16GB"])
def test_a_board_the_catalog_lacks_is_not_taken_for_one_it_resembles(other):
    """An H100 NVL (94 GB, 400 W), an H200 NVL (600 W) or a 16 GB V100-SXM2 is another card than the catalog's."""
    with pytest.raises(InputError, match=f"^gpu: unknown {other!r}"):
        gpus.gpu(other)


def test_unknown_gpu_lists_close_names():
    with pytest.raises(InputError, match=r"gpu: unknown 'h100-sxm6'; did you mean 'h100-sxm'"):
        gpus.gpu("h100-sxm6")


@pytest.fixture
def raw():
    return yaml.safe_load((gpus.GPU_DIR / "a10.yaml").read_text())


@pytest.mark.parametrize("field", ["sm_count", "memory_bandwidth_gbs", "power_limit_w"])
def test_missing_field_is_named(raw, field):
    del raw[field]
    with pytest.raises(DataError, match=f"field '{field}'"):
        gpus.GpuSpec.from_dict(raw, "a10.yaml")


def test_impossible_values_are_named(raw):
    bad = copy.deepcopy(raw)
    bad["sm_count"] = -4
    with pytest.raises(DataError, match="'sm_count': must be positive"):
        gpus.GpuSpec.from_dict(bad, "x")
    bad = copy.deepcopy(raw)
    bad["idle_power_w"] = 500
    with pytest.raises(DataError, match="idle_power_w"):
        gpus.GpuSpec.from_dict(bad, "x")
    bad = copy.deepcopy(raw)
    bad["tensor_tflops"]["fp4"] = 10
    with pytest.raises(DataError,
                       match=r"tensor_tflops.fp4': unknown dtype 'fp4'; did you mean 'fp64'[?] allowed: fp64, tf32"):
        gpus.GpuSpec.from_dict(bad, "x")


@pytest.mark.parametrize("change, said", [
    (lambda r: r.update(tensor_peak_clock_mhz=r["boost_clock_mhz"] + 1),
     "'tensor_peak_clock_mhz': cannot exceed boost"),
    (lambda r: r.update(base_clock_mhz=r["boost_clock_mhz"] + 1), "'base_clock_mhz': cannot exceed boost_clock_mhz"),
    (lambda r: r["tensor_tflops"].update(bf16="fast"), "'tensor_tflops.bf16': must be a number in (0, "),
    (lambda r: r["tensor_tflops"].update(bf16=True), "'tensor_tflops.bf16': must be a number in (0, "),
    (lambda r: r["cuda_tflops"].update(fp32=0), "'cuda_tflops.fp32': must be a number in (0, "),
])
def test_clocks_out_of_order_and_peaks_that_are_no_rate_are_named(raw, change, said):
    """A spec whose tensor-peak or base clock passes its boost clock, or a peak that is no positive number: one
    line naming the field (`joulecast gpu add` shows it)."""
    bad = copy.deepcopy(raw)
    change(bad)
    with pytest.raises(DataError, match=re.escape(f"x.yaml: field {said}")):
        gpus.GpuSpec.from_dict(bad, "x.yaml")
    with pytest.raises(DataError, match=r"^x.yaml: expected a mapping of fields, got a list$"):
        gpus.GpuSpec.from_dict([raw], "x.yaml")


def test_a_tensor_gemm_efficiency_is_a_sourced_fraction(raw):
    bad = copy.deepcopy(raw)
    bad["tensor_gemm_efficiency"] = 87
    with pytest.raises(DataError, match="'tensor_gemm_efficiency': must be between 0.05 and 1"):
        gpus.GpuSpec.from_dict(bad, "x")
    bad["tensor_gemm_efficiency"] = 0.87
    with pytest.raises(DataError, match="no source given for tensor_gemm_efficiency"):
        gpus.GpuSpec.from_dict(bad, "x")
    bad["sources"]["tensor_gemm_efficiency"] = "a measured matmul (M)"
    assert gpus.GpuSpec.from_dict(bad, "x").tensor_gemm_efficiency == 0.87


def test_a_power_limit_range_is_sourced_and_holds_the_default(raw):
    bad = copy.deepcopy(raw)
    bad["power_limit_min_w"] = 100
    bad["sources"].pop("power_limit_min_w", None)  # the catalog's A10 states its range
    with pytest.raises(DataError, match="no source given for power_limit_min_w"):
        gpus.GpuSpec.from_dict(bad, "x")
    bad["sources"]["power_limit_min_w"] = "nvidia-smi -q (M)"
    assert gpus.GpuSpec.from_dict(bad, "x").power_limit_range_w == (100.0, raw["power_limit_w"])
    for field, value, message in (("power_limit_min_w", raw["power_limit_w"] + 1, "cannot exceed power_limit_w"),
                                  ("power_limit_max_w", raw["power_limit_w"] - 1, "cannot be under power_limit_w")):
        wrong = copy.deepcopy(bad)
        wrong[field] = value
        wrong["sources"][field] = "nvidia-smi -q (M)"
        with pytest.raises(DataError, match=f"'{field}': {message}"):
            gpus.GpuSpec.from_dict(wrong, "x")


def test_a_power_limit_outside_the_cards_range_is_refused_and_a_hypothetical_scales_it():
    """The range `nvidia-smi -q` gives where sourced (the H100-SXM 200-700 W, the A10 100-150, a GH200 up to 900),
    else above idle at the maximum clock up to the default (the datasheets' max); beyond it a hypothetical GPU is the
    what-if."""
    import joulecast

    w = joulecast.workload("gpt2", batch=1, seq=64)
    for gpu, limit in (("h100-sxm", 199), ("h100-sxm", 701), ("a10", 151), ("a10", 99), ("a100-sxm4-80gb", 401),
                       ("h200", 199)):
        with pytest.raises(InputError, match=f"power_limit_w: must be (between|above) .* W on {gpu} .*got {limit}"):
            joulecast.estimate(w, gpu, power_limit_w=limit, estimator="physics")
    # where the least is idle at the maximum clock, a limit there leaves nothing to run on: the line says 'above',
    # and a sweep's range starts at the next whole watt (the H200's 122 W was listed as its least, and refused,
    # before its nvidia-smi range was sourced: 200-700 W)
    a100 = gpus.gpu("a100-pcie-40gb")
    with pytest.raises(InputError, match=r"power_limit_w: must be above 67.3 and at most 250 W on a100-pcie-40gb .*got "
                                         r"67.3"):
        joulecast.estimate(w, "a100-pcie-40gb", power_limit_w=67.3, estimator="physics")
    assert a100.power_limit_whole_range_w == (68, 250) and gpus.gpu("h200").power_limit_whole_range_w == (200, 700)
    assert a100.power_limit_text == "above 67.3 and at most 250 W"
    assert gpus.gpu("h100-sxm").power_limit_text == "between 200 and 700 W"
    from joulecast.estimator.sweep import grid
    configs, skipped = grid("gpt2", "prefill", gpus=["a100-pcie-40gb"], batches=[1], seqs=[64],
                            power_limits=["range:4"])
    assert list(configs["power_limit_w"]) == [68.0, 129.0, 189.0, 250.0] and skipped == {}
    for gpu, limit in (("h100-sxm", 200), ("h100-sxm", 700), ("gh200", 900), ("a100-sxm4-80gb", 400),
                       ("h100-sxm:power_limit_w*1.5", 1050), ("h100-sxm:power_limit_w*0.5", 150)):
        assert joulecast.estimate(w, gpu, power_limit_w=limit, estimator="physics").power_limit_w == limit
    assert gpus.gpu("h100-sxm").power_limit_range_w == (200.0, 700.0)
    assert gpus.gpu("a10").power_limit_range_w == (100.0, 150.0)  # its nvidia-smi range (data/gpus/a10.yaml)
    assert a100.power_limit_range_w == (a100.idle_power_max_clock_w, 250.0)  # none sourced: above idle


def test_a_gpu_s_own_link_is_sourced_and_its_architecture_s_where_a_spec_names_none(raw):
    """The link a node's GPUs reach each other by (tensor parallelism's all-reduces, a site's default intra-node
    link): NVLink on SXM boards, the PCIe generation on PCIe cards, each a class of links.yaml."""
    links = yaml.safe_load((gpus.GPU_DIR.parent / "distributed" / "links.yaml").read_text())
    assert set(gpus.PEER_LINKS) <= set(links) and set(gpus.ARCHITECTURE_PEER_LINK.values()) <= set(gpus.PEER_LINKS)
    cat = gpus.catalog()
    assert all(spec.peer_link in gpus.PEER_LINKS and spec.sources["peer_link"] for spec in cat.values())
    assert {n: cat[n].peer_link for n in ("a10", "l40s", "a100-pcie-40gb", "h100-pcie", "v100-pcie-16gb", "v100-sxm2",
                                          "a100-sxm4-80gb", "h200", "b200")} == {
        "a10": "pcie4", "l40s": "pcie4", "a100-pcie-40gb": "pcie4", "h100-pcie": "pcie5", "v100-pcie-16gb": "pcie3",
        "v100-sxm2": "nvlink2", "a100-sxm4-80gb": "nvlink3", "h200": "nvlink4", "b200": "nvlink5"}
    assert (links["pcie4"]["gbytes_per_s"], links["pcie5"]["gbytes_per_s"]) == (32, 64)  # a direction of 64 / 128
    bad = copy.deepcopy(raw)
    bad["peer_link"] = "nvlink9"
    with pytest.raises(DataError, match="'peer_link': unknown 'nvlink9'; did you mean 'nvlink5'[?] allowed: nvlink2, "):
        gpus.GpuSpec.from_dict(bad, "x")
    bad["peer_link"] = ["nvlink4"]  # a list is no name: one line, as a name not in the list is
    with pytest.raises(DataError, match=r"'peer_link': unknown \['nvlink4'\]; allowed: nvlink2, "):
        gpus.GpuSpec.from_dict(bad, "x")
    bad["peer_link"] = "pcie4"
    del bad["sources"]["peer_link"]
    with pytest.raises(DataError, match="no source given for peer_link"):
        gpus.GpuSpec.from_dict(bad, "x")
    del bad["peer_link"]  # a spec written before the field: its architecture's (Ampere: NVLink 3)
    spec = gpus.GpuSpec.from_dict(bad, "x")
    assert spec.peer_link == "nvlink3" and gpus.GpuSpec.from_dict(spec.to_dict()) == spec


def test_every_number_needs_a_source(raw):
    raw["sources"] = {k: v for k, v in raw["sources"].items() if "idle_power_w" not in k}
    with pytest.raises(DataError, match="no source given for idle_power_w"):
        gpus.GpuSpec.from_dict(raw, "x")


def test_aliases_are_a_list_of_names_and_one_written_alone_is_one(raw):
    """`aliases: h100x` is the one alias, not five of its letters (a string was read as a sequence); anything but
    names is refused in one line naming the field (a number raised 'not iterable')."""
    assert gpus.GpuSpec.from_dict(dict(raw, aliases="a10x"), "x").aliases == ("a10x",)
    assert gpus.GpuSpec.from_dict(dict(raw, aliases=None), "x").aliases == ()
    for bad in (5, True, ["ok", ""], [3], {"a": 1}):
        with pytest.raises(DataError, match=r"field 'aliases': a list of names, got"):
            gpus.GpuSpec.from_dict(dict(raw, aliases=bad), "x")


def test_round_trip(raw):
    spec = gpus.GpuSpec.from_dict(raw, "a10.yaml")
    assert gpus.GpuSpec.from_dict(spec.to_dict()) == spec


EXAMPLE = gpus.GPU_DIR.parent / "examples" / "a100-sxm4-80gb-500w.yaml"


def test_gpu_add_gives_spec_only_estimates_with_wider_intervals(user_home):
    import joulecast

    spec = gpus.add_gpu(EXAMPLE)
    assert spec.power_limit_w == 500 and (user_home / "gpus" / f"{spec.name}.yaml").exists()
    assert gpus.gpu("A100-80GB-500W").name == spec.name and gpus.added_gpus() == [spec.name]
    w = joulecast.workload("gpt2", batch=8, seq=512)
    new, known = joulecast.estimate(w, spec.name), joulecast.estimate(w, "a100-pcie-40gb")
    assert new.flags == ("spec-only",) and new.in_domain is False and known.flags == ()

    def width(e):
        return (e.energy_interval_j[1] - e.energy_interval_j[0]) / e.energy_j

    assert width(new) > 1.5 * width(known)


def test_a_spec_file_reads_numbers_in_exponent_form(tmp_path):
    """YAML 1.1 reads 2.039e3 (no signed exponent) as a string; a spec file reads it as the number written."""
    text = EXAMPLE.read_text().replace("memory_bandwidth_gbs: 2039", "memory_bandwidth_gbs: 2.039e3")
    assert "2.039e3" in text and yaml.safe_load(text)["memory_bandwidth_gbs"] == "2.039e3"
    (tmp_path / "spec.yaml").write_text(text)
    assert gpus.load_gpu_file(tmp_path / "spec.yaml") == gpus.load_gpu_file(EXAMPLE)


def test_gpu_add_refuses_clashes_and_replaces_on_request(user_home, tmp_path, raw):
    with pytest.raises(InputError, match=r"name: 'a10' is already in the catalog as 'a10'"):
        gpus.add_gpu(gpus.GPU_DIR / "a10.yaml")
    gpus.add_gpu(EXAMPLE)
    with pytest.raises(InputError, match="pass --replace"):
        gpus.add_gpu(EXAMPLE)
    assert gpus.add_gpu(EXAMPLE, replace=True).name == "a100-sxm4-80gb-500w"
    clash = dict(raw, name="my-a10", aliases=["nvidia-a10"])  # an alias of the shipped A10
    (tmp_path / "clash.yaml").write_text(yaml.safe_dump(clash))
    with pytest.raises(InputError, match="^aliases: 'nvidia-a10' is already in the catalog as 'a10'"):  # the field
        gpus.add_gpu(tmp_path / "clash.yaml")
    unsourced = dict(raw, name="my-gpu", aliases=[], sources={k: v for k, v in raw["sources"].items() if "idle" not in k})
    (tmp_path / "unsourced.yaml").write_text(yaml.safe_dump(unsourced))
    with pytest.raises(DataError, match="field 'sources': no source given for idle_power_w"):
        gpus.add_gpu(tmp_path / "unsourced.yaml")
    # the name is the file's: one that is no file name (a path, spaces, capitals) is refused before anything is written
    for name in ("../a10-mine", "My GPU"):
        (tmp_path / "named.yaml").write_text(yaml.safe_dump(dict(raw, name=name, aliases=[])))
        with pytest.raises(InputError, match=rf"^name: {re.escape(repr(name))}: use lower-case letters, digits"):
            gpus.add_gpu(tmp_path / "named.yaml")
    assert not list(gpus.user_gpu_dir().glob("*a10-mine*")) and not (user_home / "a10-mine.yaml").exists()
    gpus.remove_gpu("a100-sxm4-80gb-500w")
    assert "a100-sxm4-80gb-500w" not in gpus.catalog()
    with pytest.raises(InputError, match="not a GPU you added; added: none"):
        gpus.remove_gpu("a10")
    # a path out of the user catalog is a name like any other, not followed (before, it deleted the file it reached)
    bystander = user_home / "notes.yaml"
    bystander.write_text("keep")
    with pytest.raises(InputError, match=r"'\.\./notes' is not a GPU you added"):
        gpus.remove_gpu("../notes")
    assert bystander.read_text() == "keep"



def test_a_user_gpu_file_that_does_not_load_is_skipped_by_name(user_home, raw, caplog):
    """A broken file in the user catalog (not YAML, a bad field, a name or alias another GPU has) is skipped with one
    warning naming it: every other GPU still estimates (before, every estimate failed on it), asking for it says why,
    and it can be removed or replaced, never overwritten unasked."""
    import joulecast

    folder = user_home / "gpus"
    folder.mkdir(parents=True)
    (folder / "broken.yaml").write_text("name: [1")
    (folder / "fieldless.yaml").write_text(yaml.safe_dump({k: v for k, v in raw.items() if k != "display_name"}))
    (folder / "twin.yaml").write_text(yaml.safe_dump(dict(raw, name="twin", aliases=["NVIDIA-A10"])))
    gpus.add_gpu(EXAMPLE)
    gpus.reload_catalog()
    caplog.clear()  # once a load of the catalog: add_gpu's own load said it too
    with caplog.at_level("WARNING", logger="joulecast.data.gpus"):
        estimate = joulecast.estimate(joulecast.workload("gpt2", batch=1, seq=128), "a10")
    assert estimate.energy_j > 0 and "a100-sxm4-80gb-500w" in gpus.catalog()
    said = sorted(r.getMessage() for r in caplog.records)
    assert len(said) == 3 and all(m.startswith("skipped a GPU you added: ") for m in said)
    assert f"{folder / 'broken.yaml'}: not valid YAML" in said[0] and "gpu remove broken" in said[0]
    assert "field 'display_name'" in said[1]
    assert "field 'aliases': 'nvidia-a10' is already in the catalog as 'a10'" in said[2]
    assert set(gpus.skipped_gpu_files()) == {"broken", "fieldless", "twin"}
    with pytest.raises(InputError, match=r"gpu: 'broken' was added, but its file is skipped: .*not valid YAML"):
        gpus.gpu("broken")
    assert gpus.added_gpus() == ["a100-sxm4-80gb-500w", "broken", "fieldless", "twin"]
    fixed = dict(raw, name="twin", aliases=[])
    (user_home / "twin.yaml").write_text(yaml.safe_dump(fixed))
    with pytest.raises(InputError, match=r"'twin' is already added as .*twin.yaml, which does not load; pass --repl"):
        gpus.add_gpu(user_home / "twin.yaml")
    assert gpus.add_gpu(user_home / "twin.yaml", replace=True).name == "twin" and gpus.gpu("twin").name == "twin"
    gpus.remove_gpu("broken")
    assert set(gpus.skipped_gpu_files()) == {"fieldless"}


def test_a_user_catalog_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    """$JOULECAST_HOME at a file: gpu add names it (before, a NotADirectoryError traceback)."""
    home = tmp_path / "home"
    home.write_text("")
    monkeypatch.setenv("JOULECAST_HOME", str(home))
    gpus.reload_catalog()
    try:
        with pytest.raises(InputError, match=f"JOULECAST_HOME: cannot write into '{home / 'gpus'}'"):
            gpus.add_gpu(EXAMPLE)
    finally:
        monkeypatch.delenv("JOULECAST_HOME")
        gpus.reload_catalog()


def test_architecture_traits_are_validated_data_with_sources(tmp_path):
    """Tile shapes, residency and L2 bandwidth per architecture come from data/architectures/*.yaml, each number
    cited; a bad file is one error naming the file and the field."""
    from joulecast.data import architectures
    from joulecast.data.errors import DataError

    hopper = architectures.architecture("hopper")
    assert hopper.tc_tile == (128, 256, 64) and hopper.tc_ctas_per_sm == 1 and hopper.code == 9.0
    assert set(architectures.catalog()) == {"volta", "ampere", "ada", "hopper", "blackwell"}
    for traits in architectures.catalog().values():
        assert {"code", "tc_tile", "threads_per_sm", "l2_bytes_per_clock"} <= set(traits.sources)
    raw = {"name": "x", "code": 9.0, "tc_tile": [128, 256], "tc_ctas_per_sm": 1, "simt_tile": [128, 128, 8],
           "simt_ctas_per_sm": 2, "threads_per_sm": 2048, "l2_bytes_per_clock": 5120,
           "sources": {"code, tc_tile, tc_ctas_per_sm, simt_tile, simt_ctas_per_sm, threads_per_sm": "s"}}
    with pytest.raises(DataError, match=r"x.yaml: field 'tc_tile': must be three positive integers"):
        architectures.ArchTraits.from_dict(raw, "x.yaml")
    with pytest.raises(DataError, match=r"field 'sources': no source given for l2_bytes_per_clock"):
        architectures.ArchTraits.from_dict({**raw, "tc_tile": [128, 256, 64]}, "x.yaml")
    # Blackwell's tensor-core CTAs work in pairs; every other architecture loads each CTA's whole tile
    assert {name: t.tc_cluster for name, t in architectures.catalog().items()} == {
        "volta": 1, "ampere": 1, "ada": 1, "hopper": 1, "blackwell": 2}
    sourced = {**raw, "tc_tile": [128, 256, 64], "sources": {**raw["sources"], "l2_bytes_per_clock": "s"}}
    for bad in (0, 2.5, True, 17):
        with pytest.raises(DataError, match=r"x.yaml: field 'tc_cluster': must be an integer from 1 to 16"):
            architectures.ArchTraits.from_dict({**sourced, "tc_cluster": bad}, "x.yaml")
    with pytest.raises(DataError, match=r"field 'sources': no source given for tc_cluster"):
        architectures.ArchTraits.from_dict({**sourced, "tc_cluster": 2}, "x.yaml")



def test_serving_engines_are_validated_data_with_sources():
    """Engines come from data/serving_engines.yaml, every figure cited; a bad entry is one error naming the file,
    the engine and the field."""
    from joulecast.data import engines
    from joulecast.data.errors import DataError
    from joulecast.features import arch

    assert set(engines.catalog()) == {"vllm-0.5.4", "vllm-0.11.1", "sglang-0.4", "trt-llm"}
    vllm = engines.engine("vllm-0.5.4")
    assert vllm.host_s_per_sequence == 0.406e-3 and vllm.decode_attention == "paged"  # the decimal, to the bit
    assert arch.SERVING_ENGINES["vllm-0.5.4"]["host_s_per_sequence"] == vllm.host_s_per_sequence
    for entry in engines.catalog().values():
        assert {"host_ms_per_sequence", "power_over_idle"} <= set(entry.sources)
    good = {"host_ms_per_sequence": 0.1, "power_over_idle": 1.5, "sources": {"host_ms_per_sequence, power_over_idle": "s"}}
    assert engines.parse({"x": good}, "e.yaml")["x"].host_s_per_sequence == 0.1e-3
    assert engines.parse({"x": good}, "e.yaml")["x"].all_reduce == "ring"  # NCCL's, where an entry names none
    assert engines.parse({"x": good}, "e.yaml")["x"].sampler is None       # fused sampling, not priced
    assert {n for n, e in engines.catalog().items() if e.sampler == "sort"} == {"vllm-0.5.4", "vllm-0.11.1"}
    assert not engines.parse({"x": good}, "e.yaml")["x"].host_overlaps  # between steps, where an entry says nothing
    assert {n for n, e in engines.catalog().items() if e.host_overlaps} == {"vllm-0.11.1"}
    # host work per tensor-parallel GPU beyond the first: vLLM 0.5.4's alone, none where an entry says nothing
    assert {n: e.host_s_per_tp_worker for n, e in engines.catalog().items() if e.host_s_per_tp_worker} == {
        "vllm-0.5.4": 8.84e-3}
    assert engines.parse({"x": good}, "e.yaml")["x"].host_s_per_tp_worker == 0.0
    # the host work's measured rows' range, its ends to the bit; the figure at both ends where an entry has none
    assert {n: e.host_s_per_sequence_range for n, e in engines.catalog().items()} == {
        "vllm-0.5.4": (0.335e-3, 0.571e-3), "vllm-0.11.1": (0.068e-3, 0.218e-3), "sglang-0.4": (0.0, 0.0),
        "trt-llm": (0.0, 0.0)}
    assert engines.parse({"x": good}, "e.yaml")["x"].host_s_per_sequence_range == (0.1e-3, 0.1e-3)
    ranged = {**good, "host_ms_per_sequence_range": [0.05, 0.2],
              "sources": {"host_ms_per_sequence, power_over_idle, host_ms_per_sequence_range": "s"}}
    assert engines.parse({"x": ranged}, "e.yaml")["x"].host_s_per_sequence_range == (0.05e-3, 0.2e-3)
    for bad, message in (({**ranged, "host_ms_per_sequence_range": [0.2, 0.3]},
                          r"'host_ms_per_sequence_range': must hold host_ms_per_sequence \(0.1\) between"),
                         ({**ranged, "host_ms_per_sequence_range": [0.05, float("nan")]},
                          r"'host_ms_per_sequence_range': must hold"),
                         ({**ranged, "host_ms_per_sequence_range": 0.2},
                          r"'host_ms_per_sequence_range': must be two numbers \[lowest, highest\] \(ms\), got 0.2"),
                         ({**ranged, "host_ms_per_sequence_range": [0.05, True]},
                          "'host_ms_per_sequence_range': must be two"),
                         ({**good, "host_ms_per_sequence_range": [0.05, 0.2]},
                          "'sources': no source given for host_ms_per_sequence_range"),
                         ({**good, "host_ms_per_sequence": -1}, "'host_ms_per_sequence': must be a number from 0"),
                         ({**good, "power_over_idle": 0.5}, "'power_over_idle': a GPU waiting draws at least"),
                         ({**good, "decode_attention": "radix"}, "'decode_attention': unknown 'radix'"),
                         ({**good, "sources": {"host_ms_per_sequence": "s"}}, "'sources': no source given for power_over_idle"),
                         ({**good, "batch": 4}, "'batch': unknown field"),
                         ({**good, "all_reduce": "tree"}, "'all_reduce': unknown 'tree'; allowed: ring, custom"),
                         ({**good, "all_reduce": "custm"}, "'all_reduce': unknown 'custm'; did you mean 'custom'"),
                         ({**good, "all_reduce": "custom"}, "'sources': no source given for all_reduce"),
                         ({**good, "sampler": "flashinfer"}, "'sampler': unknown 'flashinfer'; allowed: sort"),
                         ({**good, "sampler": ["sort"]}, r"'sampler': unknown \['sort'\]; allowed: sort \(or none\)"),
                         ({**good, "sampler": "sort"}, "'sources': no source given for sampler"),
                         ({**good, "host_overlaps": "yes"}, "'host_overlaps': must be true or false, got 'yes'"),
                         ({**good, "host_overlaps": True}, "'sources': no source given for host_overlaps"),
                         ({**good, "host_ms_per_tp_worker": -2}, "'host_ms_per_tp_worker': must be a number from 0"),
                         ({**good, "host_ms_per_tp_worker": 5},
                          "'sources': no source given for host_ms_per_tp_worker")):
        with pytest.raises(DataError, match=f"e.yaml: x: field {message}"):
            engines.parse({"x": bad}, "e.yaml")
    with pytest.raises(InputError, match="engine: unknown 'sglang'; did you mean 'sglang-0.4'"):
        engines.engine("sglang")

def test_a_hypothetical_gpu_scales_a_catalog_one_and_is_flagged_a_what_if():
    import joulecast

    base, twice = gpus.gpu("h100-sxm"), gpus.gpu("H100-SXM:memory_bandwidth_gbs*2")
    assert twice.memory_bandwidth_gbs == 2 * base.memory_bandwidth_gbs and twice.sm_count == base.sm_count
    slow = gpus.gpu("h100-sxm:clock*0.5:sm_count*1.5")
    assert slow.boost_clock_mhz == base.boost_clock_mhz / 2 and slow.sm_count == 198
    assert slow.tensor_tflops["bf16"] == pytest.approx(base.tensor_tflops["bf16"] * 0.75)  # peaks follow both
    # as CUDA graphs: eager, this decode step is host-bound (1,002 launches x 25 us), where bandwidth does not matter
    decode = joulecast.workload("llama-3-8b", phase="decode", batch=16, seq=2048, launch_mode="graph")
    faster = joulecast.estimate(decode, twice.name)
    assert faster.time_s < joulecast.estimate(decode, "h100-sxm").time_s and "what-if" in faster.flags
    with pytest.raises(InputError, match="give FIELD\\*FACTOR or FIELD=VALUE with FIELD one of sm_count, clock"):
        gpus.gpu("h100-sxm:hbm*2")
    # a field set: the factor that takes it there, its peaks following, the value as given
    assert gpus.gpu("h100-sxm:memory_bandwidth_gbs=8000").memory_bandwidth_gbs == 8000.0
    wider = gpus.gpu("h100-sxm:sm_count=144:clock=1650")
    assert (wider.sm_count, wider.boost_clock_mhz) == (144, 1650.0)
    assert wider.tensor_tflops["bf16"] == pytest.approx(base.tensor_tflops["bf16"] * 144 / 132 * 1650 / 1980)
    assert joulecast.estimate(decode, "h100-sxm:memory_bandwidth_gbs=6700").time_s == pytest.approx(faster.time_s)
    with pytest.raises(InputError, match="the value must be a positive number below 1000x h100-sxm's 50, got '-1'"):
        gpus.gpu("h100-sxm:l2_mb=-1")
    with pytest.raises(InputError, match="memory_bandwidth_gbs': must be between 10 and 200000"):
        gpus.gpu("h100-sxm:memory_bandwidth_gbs*100")
    for change, said in (("l2_mb*x", "the factor must be a positive number below 1000, got 'x'"),
                         ("clock=inf", "the value must be a positive number below 1000x h100-sxm's 1980, got 'inf'")):
        with pytest.raises(InputError, match=re.escape(f"gpu: '{change}' in 'h100-sxm:{change}': {said}")):
            gpus.gpu(f"h100-sxm:{change}")
    for factor in ("-1", "1e9"):  # a huge factor is refused with the bound it passes, not called "not positive"
        with pytest.raises(InputError, match=f"the factor must be a positive number below 1000, got '{factor}'"):
            gpus.gpu(f"h100-sxm:l2_mb*{factor}")
    # SMs are whole: the peaks follow the SMs there are (133 of 132 at 1.01x), an SM's rate as the card's
    for name in ("h100-sxm:sm_count*1.01", "h100-sxm:sm_count=133", "h100-sxm:sm_count=133.4"):
        more = gpus.gpu(name)
        assert more.sm_count == 133
        assert more.tensor_tflops["bf16"] / 133 == pytest.approx(base.tensor_tflops["bf16"] / 132)
    with pytest.raises(InputError, match="'sm_count\\*0.001' in 'h100-sxm:sm_count\\*0.001': leaves h100-sxm no SM"):
        gpus.gpu("h100-sxm:sm_count*0.001")
    # a limit scaled under the card's idle says both figures (before, only "must be below power_limit_w")
    with pytest.raises(InputError, match=re.escape("field 'idle_power_w': must be below power_limit_w (73.5 W against "
                                                   "70 W)")):
        gpus.gpu("h100-sxm:power_limit_w*0.1")


def test_a_what_if_reads_as_its_base_but_for_the_change_physics_gives():
    """A hypothetical GPU takes its base's learned correction at the same setting (before, physics' point: an A100
    with its L2 scaled by 1 read GPT-2's prefill 5 % under the A100's own estimate); at a setting the base cannot run
    (a 400 W limit on the 250 W A100-PCIe), physics' point, as a GPU never trained on reads."""
    import joulecast

    work = joulecast.workload("gpt2", batch=8, seq=512)
    real = joulecast.estimate(work, "a100")
    same = joulecast.estimate(work, "a100:l2_mb*1")
    assert (same.energy_j, same.time_s, same.energy_interval_j) == (real.energy_j, real.time_s, real.energy_interval_j)
    assert same.flags == ("what-if",) and not same.in_domain and "as a100-pcie-40gb is" in same.outside_domain[-1]
    assert real.flags == () and real.in_domain
    # physics moves it: twice the L2 keeps more of the pass's traffic; the correction is the base's
    wider = joulecast.estimate(work, "a100:l2_mb*2")
    assert wider.physics_energy_j < real.physics_energy_j
    assert wider.time_s / wider.physics_time_s == pytest.approx(real.time_s / real.physics_time_s, rel=1e-12)
    # its interval the base's, widened for the change: half physics' move in energy each way, in quadrature
    from joulecast.estimator.api import WHAT_IF_REACH
    # (a pass under the limit, its host stated: no cap on the point, no host's range joined)
    stated = joulecast.workload("bert-large", batch=8, seq=128, host_dispatch_s=25e-6)
    ends = [joulecast.estimate(stated, g) for g in ("a100", "a100:memory_bandwidth_gbs*2")]
    assert max(e.power_w for e in ends) < 0.9 * 250
    change = abs(math.log(ends[1].physics_energy_j / ends[0].physics_energy_j))
    reach = [abs(math.log(e.energy_interval_j[0] / e.energy_j)) for e in ends]
    assert reach[1] == pytest.approx(math.hypot(reach[0], WHAT_IF_REACH["energy"] * change), rel=1e-9)
    assert wider.energy_interval_j[1] / wider.energy_j > real.energy_interval_j[1] / real.energy_j
    # rated 200 W: the base's correction capped at 200 W, on physics of a card whose budget is its rating's
    rated = joulecast.estimate(work, "a100:power_limit_w*0.8")
    capped = joulecast.estimate(work, "a100", power_limit_w=200)
    assert rated.time_s / rated.physics_time_s == pytest.approx(capped.time_s / capped.physics_time_s, rel=1e-12)
    beyond = joulecast.estimate(work, "a100:power_limit_w*1.6")   # 400 W: no A100-PCIe runs it
    assert beyond.time_s == beyond.physics_time_s and beyond.flags == ("spec-only", "what-if")
    assert "a setting a100-pcie-40gb cannot run" in beyond.outside_domain[-1]
    assert gpus.gpu("a100:l2_mb*2").what_if_of == "a100-pcie-40gb" and gpus.gpu("a100").what_if_of is None
    # estimate_many and a sweep take the same correction, row by row
    names = ("a100", "a100:l2_mb*1", "a100:l2_mb*2", "a100:power_limit_w*0.8", "a100:power_limit_w*1.6")
    rows = joulecast.estimate_many([{"model": "gpt2", "gpu": g, "batch": 8, "seq": 512} for g in names])
    assert rows["energy_j"].tolist() == pytest.approx(
        [e.energy_j for e in (real, same, wider, rated, beyond)], rel=1e-12)
    assert rows["energy_hi_j"].tolist() == pytest.approx(
        [e.energy_interval_j[1] for e in (real, same, wider, rated, beyond)], rel=1e-12)
    assert rows["flags"].tolist() == ["", "what-if", "what-if", "what-if", "spec-only, what-if"]
    assert rows["in_domain"].tolist() == [True, False, False, False, False]
    assert rows["outside_domain"].iloc[1] == same.outside_domain[-1]


def test_a_measured_idle_table_sets_idle_power_between_its_clocks(raw):
    """The EnergAIzer DVFS idle tables of the H100-SXM and the A100-SXM4-80GB (issue 31): read as measured, where
    the default DVFS shape (fitted to the A100-PCIe's table) read the H100 12 W low at 1,830 MHz."""
    from joulecast.features.power import idle_power_w

    h100 = gpus.gpu("h100-sxm")
    assert len(h100.idle_power_table) == 109 and h100.idle_power_table[0] == (360.0, 72.76)
    assert float(idle_power_w(h100, 1830)) == pytest.approx(118.22)
    assert float(idle_power_w(h100, 1837.5)) == pytest.approx((118.22 + 118.89) / 2)
    assert float(idle_power_w(h100, 345)) == pytest.approx(72.76)   # below the table: its lowest clock's
    without = gpus.GpuSpec.from_dict({**h100.to_dict(), "idle_power_table": None})
    assert float(idle_power_w(without, 1830)) == pytest.approx(106.1, abs=0.1)
    assert gpus.GpuSpec.from_dict(h100.to_dict()) == h100
    a100 = gpus.gpu("a100-sxm4-80gb")  # EnergAIzer's netsres117: its table, and idle at the maximum clock from it
    assert a100.idle_power_table[-1] == (1410.0, a100.idle_power_max_clock_w) == (1410.0, 82.29)
    # a clock scaling carries the table's clocks with it
    fast = gpus.gpu("h100-sxm:clock*1.1")
    assert float(idle_power_w(fast, 1830 * 1.1)) == pytest.approx(118.22)
    for table, message in (({900: 50.0}, "at least two"),
                           ({900: 50.0, 5000: 60.0}, r"idle_power_table.5000.*\(0, 1695\] MHz"),
                           ({900: 50.0, 1200: 400.0}, r"in \(0, 150\) W"), ({900: 50.0, 1200: "hot"}, "numbers")):
        bad = {**raw, "idle_power_table": table, "sources": {**raw["sources"], "idle_power_table": "test"}}
        with pytest.raises(DataError, match=message):
            gpus.GpuSpec.from_dict(bad, "x")
    with pytest.raises(DataError, match="no source given for idle_power_table"):
        gpus.GpuSpec.from_dict({**raw, "idle_power_table": {900: 50.0, 1200: 60.0}}, "x")
