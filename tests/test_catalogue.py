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
