"""The main job runs and checks itself against eager."""

import ember.demo


def test_demo_compiles_and_matches_eager(capsys):
    assert ember.demo.main(["--backend", "eager", "--backend", "aot_eager", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 backends compiled and matched eager" in out
    assert "captured one graph" in out
