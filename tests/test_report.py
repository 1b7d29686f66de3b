"""spc report: one self-contained HTML page (no URL outside it, every section, charts as inline
SVG), the same bytes for the same plan and input, plan strings escaped, errors in one line."""

from __future__ import annotations

import json
import re
import sys
import types
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import one_line_error, spc
from tests.test_untrusted_plans import edited, first_op

SECTIONS = ("summary", "passes", "l1", "time", "per-layer", "overlay", "program")
HOSTILE = "<script>alert(1)</script><img src=x.png onerror=alert(2)>"


class Page(HTMLParser):
    """What the page asks a browser to fetch or run: every tag, its attributes, and the text of
    <script> and <style> elements."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: list[str] = []
        self.style = ""
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.ids += [v for k, v in attrs if k == "id" and v]
        self._in = tag

    def handle_data(self, data: str) -> None:
        if self._in == "style":
            self.style += data


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


def assert_self_contained(text: str) -> Page:
    assert "http://" not in text and "https://" not in text
    page = parse(text)
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "iframe", "object", "embed", "base"), tag
        for key, value in attrs.items():
            assert not key.startswith("on"), (tag, key)  # no event handlers
            if key in ("src", "href", "xlink:href", "action", "srcset", "poster", "data"):
                assert value is not None and value.startswith(("data:", "#")), (tag, key, value[:80])
    assert "url(" not in page.style and "@import" not in page.style
    return page


def report(plan: Path, out: Path, *args: object) -> str:
    code, stdout, err = spc("report", plan, *args, "-o", out)
    assert code == 0, err
    assert stdout.startswith(f"wrote {out}")
    return out.read_text(encoding="utf-8")


def test_the_report_is_self_contained_with_every_section(small_plan: Path, tmp_path: Path) -> None:
    text = report(small_plan, tmp_path / "r.html")
    page = assert_self_contained(text)
    assert set(SECTIONS) <= set(page.ids)
    # the two plan charts, from matplotlib, inline: no <img> of a chart, no file beside the page
    assert text.count("<svg") == 2 and 'class="chart"' in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    for said in ("fuse-score-fold", "choose-memory-config", "ttnn calls", "budget", "predicted"):
        assert said in text, said
    from spc.plan.io import read_plan

    calls = len(read_plan(small_plan).program.device_ops)
    assert f"Device program: {calls} ttnn calls" in text
    assert "Give an input" in text  # the per-layer and keypoint sections say what they need


def test_the_same_plan_gives_the_same_bytes(small_plan: Path, tmp_path: Path) -> None:
    a = report(small_plan, tmp_path / "a.html")
    b = report(small_plan, tmp_path / "b.html")
    assert a == b


def test_with_an_input_the_overlay_and_the_per_layer_section(small_plan: Path, images: dict[str, Path],
                                                            tmp_path: Path) -> None:
    text = report(small_plan, tmp_path / "r.html", images["camera"])
    page = assert_self_contained(text)
    assert set(SECTIONS) <= set(page.ids)
    overlay = [a for t, a in page.tags if t == "img"]
    assert len(overlay) == 1 and (overlay[0]["src"] or "").startswith("data:image/png;base64,")
    assert re.search(r"\d+ keypoints on <b>camera.png</b>", text)
    # the per-layer comparison (tuning/per_layer.py): its chart and table
    assert text.count("<svg") == 3 and "tensors compared with onnxruntime" in text
    assert "relu_1" in text and "encoder.conv_blocks.0.conv_b" in text
    assert report(small_plan, tmp_path / "again.html", images["camera"]) == text


def _fake_per_layer(report: dict[str, Any]) -> types.ModuleType:
    """A stand-in for spc.tuning.per_layer with its interface: per_layer(...).as_dict()."""
    module = types.ModuleType("spc.tuning.per_layer")
    seen: dict[str, Any] = {}

    class Report:
        def as_dict(self) -> dict[str, Any]:
            return report

    def per_layer(plan: Any, plan_path: Path, x: Any, onnx: Path | None, name: str = "input",
                  min_pcc: float | None = None) -> Report:
        seen.update(name=name, min_pcc=min_pcc, onnx=onnx)
        return Report()

    module.per_layer = per_layer  # type: ignore[attr-defined]
    module.seen = seen  # type: ignore[attr-defined]
    return module


def test_per_layer_rows_become_a_table_and_a_chart(small_plan: Path, images: dict[str, Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def row(name: str, call: int, block: str, pcc: Any) -> dict[str, Any]:
        return {"name": name, "op": "spc.Conv2d", "block": block, "precision": "w:bfp8_b LoFi out:bfloat16",
                "call": call, "shape": [1, 64, 60, 80], "pcc": pcc, "max_abs": 0.5, "rel_err": 0.3}

    fake = _fake_per_layer({
        "input": "camera.png", "min_pcc": 0.995, "internal": 7, "skipped": [{"name": "x", "reason": "r"}],
        "tensors": [row("unsqueeze", -1, "(device input)", 0.99999), row(HOSTILE, 0, "encoder.1", 0.91),
                    row("relu$x_{$", 1, "encoder.2", 0.993), row("const", 2, "encoder.2", None)],
        "blocks": [{"block": HOSTILE, "precision": "w:bfp8_b LoFi", "input_error": 0.0, "output_error": 0.3,
                    "growth": 0.3, "local_error": 0.25}],
        "first_under": HOSTILE, "worst_block": HOSTILE})
    monkeypatch.setitem(sys.modules, "spc.tuning.per_layer", fake)
    text = report(small_plan, tmp_path / "r.html", images["camera"], "--min-pcc", "0.995")
    page = assert_self_contained(text)
    assert fake.seen["min_pcc"] == 0.995 and fake.seen["name"] == "camera.png"  # type: ignore[attr-defined]
    assert fake.seen["onnx"] == small_plan.with_suffix(".onnx")  # type: ignore[attr-defined]
    assert "<script" not in text and all(t != "script" for t, _ in page.tags)
    assert [t for t, _ in page.tags].count("img") == 1  # the overlay; the hostile name's <img> is text
    assert text.count("<svg") == 3 and "4 tensors compared with onnxruntime" in text
    assert "1 not comparable, 7 inside fused ops" in text
    # the tensors under the comparison's own floor (0.995: the second and third) are marked
    assert text.count('<tr class="miss">') == 2 and text.count('<tr class="worst">') == 1
    assert "first tensor under PCC 0.995: <b>&lt;script&gt;" in text
    assert "0.910000" in text and "w:bfp8_b LoFi" in text and ">input<" in text
    assert "relu$x_{$" in text  # in the chart's labels as it is: a "$" never starts TeX


def test_a_plan_the_comparison_cannot_read_leaves_a_note(small_plan: Path, images: dict[str, Path],
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spc.errors import SpcError

    module = types.ModuleType("spc.tuning.per_layer")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise SpcError("the plan has no record of which device tensor holds which model value; recompile it")

    module.per_layer = refuse  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "spc.tuning.per_layer", module)
    text = report(small_plan, tmp_path / "r.html", images["camera"])
    assert "no per-layer comparison: the plan has no record" in text and 'src="data:image/png' in text


def test_plan_strings_are_escaped(small_plan: Path, tmp_path: Path) -> None:
    def manifest(m: dict[str, Any]) -> dict[str, Any]:
        m["notes"] = [HOSTILE]
        m["recognised"] = [f"fuse-l2norm: {HOSTILE}"]
        m["model_metadata"] = {"spc.weights.name": HOSTILE, "k$x$": "$\\frac{1}{0}$"}
        return m

    plan = edited(small_plan, tmp_path / "h.ttplan", manifest=manifest,
                  program=first_op(lambda op: op.update(block=HOSTILE + "$x_{$")))
    text = report(plan, tmp_path / "r.html")
    page = assert_self_contained(text)
    assert "<script" not in text and all(t not in ("script",) for t, _ in page.tags)
    assert [t for t, _ in page.tags if t == "img"] == []  # the hostile <img> is text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_json_and_overwrite(small_plan: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    code, stdout, err = spc("report", small_plan, "-o", out, "--json")
    assert code == 0, err
    assert json.loads(stdout) == {"output": str(out), "input": None, "keypoints": None, "per_layer": False}
    code, _, err = spc("report", small_plan, "-o", out)
    one_line_error(code, err, contains="already exists")
    code, _, err = spc("report", small_plan, "-o", out, "--overwrite")
    assert code == 0, err


def test_never_over_an_input(small_plan: Path, images: dict[str, Path], tmp_path: Path) -> None:
    before = small_plan.read_bytes()
    for args in ((small_plan, "-o", small_plan), (small_plan, images["camera"], "-o", images["camera"]),
                 (small_plan, "-o", small_plan.with_suffix(".onnx"), "--onnx", small_plan.with_suffix(".onnx"))):
        code, _, err = spc("report", *args, "--overwrite")
        one_line_error(code, err, contains="writing it would replace the input")
    assert small_plan.read_bytes() == before


def test_a_bad_plan_is_one_line(small_plan: Path, tmp_path: Path, images: dict[str, Path]) -> None:
    junk = tmp_path / "junk.ttplan"
    junk.write_bytes(b"not a zip")
    out = tmp_path / "r.html"
    code, _, err = spc("report", junk, "-o", out)
    one_line_error(code, err, contains="junk.ttplan")
    code, _, err = spc("report", tmp_path / "missing.ttplan", "-o", out)
    one_line_error(code, err, contains="missing.ttplan")
    plan = edited(small_plan, tmp_path / "e.ttplan", program=first_op(lambda op: op["args"].update(stride=[0, 1])))
    code, _, err = spc("report", plan, "-o", out)
    one_line_error(code, err, contains="recompile the plan")
    # an input the plan cannot take, and a plan whose source ONNX is not there
    code, _, err = spc("report", small_plan, tmp_path / "none.png", "-o", out)
    one_line_error(code, err, contains="none.png")
    import shutil

    from spc.plan.io import read_plan
    from spc.tuning.comparison import find_source

    gone = tmp_path / "gone.onnx"  # the plan records where its source was: removed since
    shutil.copy(find_source(read_plan(small_plan), small_plan, None), gone)
    alone = tmp_path / "alone.ttplan"
    assert spc("compile", gone, "-o", alone)[0] == 0
    gone.unlink()
    code, _, err = spc("report", alone, images["camera"], "-o", out)
    one_line_error(code, err, contains="--onnx")
    assert not out.exists()


def test_without_matplotlib_one_line_says_what_to_install(small_plan: Path, tmp_path: Path) -> None:
    import subprocess

    blocked = ("import sys; sys.modules['matplotlib'] = None; from spc.cli import main; "
               "sys.argv = ['spc', *sys.argv[1:]]; main()")
    out = tmp_path / "r.html"
    done = subprocess.run([sys.executable, "-c", blocked, "report", str(small_plan), "-o", str(out)],
                          capture_output=True, text=True, check=False)
    one_line_error(done.returncode, done.stderr, contains="matplotlib")
    assert "pip install 'spc[full]'" in done.stderr and not out.exists()


def test_raw_heads_get_the_standard_extraction_overlay(images: dict[str, Path], tmp_path: Path) -> None:
    """A network without its post-processing (MagicLeap's raw heads): the keypoints `spc check`
    compares, by SuperPoint's standard extraction of the logits."""
    import shutil

    from spc.compiler import compile_onnx
    from tests.corpus.exports import cached

    src = tmp_path / "raw.onnx"
    shutil.copy(cached("magicleap_legacy_op11", 120, 160), src)
    compile_onnx(src, tmp_path / "raw.ttplan")
    text = report(tmp_path / "raw.ttplan", tmp_path / "r.html", images["camera"])
    assert_self_contained(text)
    assert re.search(r"\d+ keypoints on <b>camera.png</b> from SuperPoint&#x27;s standard extraction", text)
    assert 'src="data:image/png;base64,' in text and "tensors compared with onnxruntime" in text
