"""The main job runs and checks itself against eager."""

import ember.demo


def test_demo_compiles_and_matches_eager(capsys):
    # inductor covers an ATen call whose optional output is None (need_weights=False).
    backends = ["--backend", "eager", "--backend", "aot_eager", "--backend", "inductor"]
    assert ember.demo.main([*backends, "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 backends compiled and matched eager" in out
    assert "captured one graph of" in out and "guard function of" in out
