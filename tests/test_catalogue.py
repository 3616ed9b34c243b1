from watchdog import catalogue, reasons


def test_names_are_unique_and_aliases_resolve_to_their_metric():
    assert len(set(catalogue.NAMES)) == len(catalogue.NAMES)
    for m in catalogue.METRICS:
        assert catalogue.canonical(m.name) == m.name
        for a in m.aliases:
            assert catalogue.canonical(a) == m.name, a


def test_nvidia_smi_header_spellings_map_to_catalogue_names():
    assert catalogue.canonical(" power.draw [W]") == "power.draw"
    assert catalogue.canonical("clocks_throttle_reasons.active") == "clocks_event_reasons.active"
    assert catalogue.canonical("pcie.link.gen.gpucurrent") == "pcie.link.gen.current"
    assert catalogue.canonical("clocks.current.sm [MHz]") == "clocks.sm"
    assert catalogue.canonical("no.such.metric") is None


def test_reason_bits_decode_into_words():
    assert reasons.decode(0x4 | 0x10) == ["power cap", "sync boost"]
    assert reasons.flags(0x48) == ["hw_slowdown", "hw_thermal"]
    assert reasons.decode(None) == [] and reasons.decode(float("nan")) == []
    assert reasons.parse_mask("0x0000000000000080") == 0x80


def _label(name: str) -> str | None:
    m = catalogue.gpu_model(name)
    return m.label if m is not None else None


def test_gpu_names_match_whole_words_not_a_longer_model_number():
    # each of these names contains another model's key as a substring
    assert _label("NVIDIA RTX A4000") is None  # "a40" inside "a4000"
    assert _label("NVIDIA RTX A1000") is None  # "a10" inside "a1000"
    assert _label("NVIDIA T400") is None  # "t4" inside "t400"
    assert _label("Tesla V100S-PCIE-32GB") is None  # "v100" inside "v100s"
    assert _label("NVIDIA L40S") == "L40S" and _label("NVIDIA L40") == "L40"
    assert _label("NVIDIA L4") == "L4" and _label("Tesla T4") == "T4"
    assert _label("NVIDIA A10") == "A10" and _label("NVIDIA A100-PCIE-40GB") == "A100 PCIe 40GB"
    assert _label("Lab GPU") is None and _label("") is None and _label(None) is None
