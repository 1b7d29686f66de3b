"""`spc match` and `spc.match`: a SuperPoint plan and a matcher plan over images -> hloc's
features.h5 and matches.h5, read back as hloc reads them and compared with onnxruntime running
the matcher's ONNX on the same keypoints; the matcher's inputs found by their shapes."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from spc.ir.types import DType
from spc.plan.program import Program, TensorSpec
from spc.runtime.matching import hloc_matches, kept_keypoints, matcher_roles, pair_feeds
from spc.tuning.metrics import index_set_f1
from tests.conftest import one_line_error, spc

K = 64


# hloc's reader (hloc/utils/parsers.py names_to_pair, hloc/utils/io.py get_matches), as hloc runs it
def names_to_pair(name0: str, name1: str) -> str:
    return "/".join((name0.replace("/", "-"), name1.replace("/", "-")))


def get_matches(path: Path, name0: str, name1: str) -> tuple[np.ndarray, np.ndarray]:
    with h5py.File(str(path), "r", libver="latest") as hfile:
        reverse = False
        pair = names_to_pair(name0, name1)
        if pair not in hfile:
            pair = names_to_pair(name1, name0)
            if pair not in hfile:
                raise ValueError(f"Could not find pair {(name0, name1)}")
            reverse = True
        matches = hfile[pair]["matches0"].__array__()
        scores = hfile[pair]["matching_scores0"].__array__()
    idx = np.where(matches != -1)[0]
    matches = np.stack([idx, matches[idx]], -1)
    if reverse:
        matches = matches[:, ::-1]
    return matches, scores[idx]


def padded(rows: np.ndarray, fill: object) -> np.ndarray:
    """``rows`` (N, C) to the matcher's K rows, the rest ``fill``, with a batch axis."""
    out = np.empty((K, rows.shape[1]), np.float32)
    out[:] = fill
    out[:len(rows)] = rows
    return out[None]


@pytest.fixture(scope="module")
def plans(exports, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from spc.compiler import compile_onnx
    from tests.corpus.mnn import export

    folder = tmp_path_factory.mktemp("match")
    sp = exports(120, 160, max_keypoints=K)
    mnn = export(folder / "mnn.onnx", k=K, dim=256, threshold=0.8)
    out = {"sp": folder / "sp.ttplan", "mnn": folder / "mnn.ttplan", "mnn_onnx": mnn}
    compile_onnx(sp, out["sp"])
    compile_onnx(mnn, out["mnn"])
    return out


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory, images: dict[str, Path]) -> Path:
    """Three images in a tree: the astronaut, a crop of it (true matches), the coffee."""
    folder = tmp_path_factory.mktemp("pictures")
    (folder / "db").mkdir()
    astro = Image.open(images["astronaut"])
    astro.save(folder / "db" / "astronaut.png")
    astro.crop((30, 20, 500, 420)).save(folder / "db" / "crop.png")
    Image.open(images["coffee"]).save(folder / "coffee.png")
    return folder


def _spec(name: str, dtype: str, shape: list[int]) -> TensorSpec:
    return TensorSpec(name, dtype, shape)


def _program(inputs: list[TensorSpec], outputs: list[TensorSpec]) -> Program:
    return Program(inputs, outputs, [], [], [], [], [])


def test_roles_by_shape_not_name() -> None:
    """LightGlue's inputs under names no one would guess, and SuperGlue's (descriptors [1, D, K],
    scores); what is not a matcher says why."""
    lg = _program([_spec("a", "f32", [1, 100, 2]), _spec("b", "f32", [1, 90, 2]), _spec("c", "f32", [1, 100, 128]),
                   _spec("d", "f32", [1, 90, 128]), _spec("e", "f32", [1, 2]), _spec("f", "f32", [1, 2])],
                  [_spec("x", "f32", [1, 100]), _spec("y", "i64", [1, 100]), _spec("z", "f32", [1, 100])])
    roles = matcher_roles(lg)
    assert not isinstance(roles, str), roles
    assert [(s.keypoints, s.descriptors, s.size, s.count, s.channels_first) for s in roles.sides] == [
        ("a", "c", "e", 100, False), ("b", "d", "f", 90, False)]
    assert (roles.matches, roles.match_scores) == ("y", "x")
    sg = _program([_spec("k0", "f32", [1, 50, 2]), _spec("s0", "f32", [1, 50]), _spec("d0", "f32", [1, 256, 50]),
                   _spec("k1", "f32", [1, 50, 2]), _spec("s1", "f32", [1, 50]), _spec("d1", "f32", [1, 256, 50])],
                  [_spec("m", "i32", [1, 50])])
    roles = matcher_roles(sg)
    assert not isinstance(roles, str), roles
    assert [(s.descriptors, s.scores, s.channels_first, s.dim) for s in roles.sides] == [
        ("d0", "s0", True, 256), ("d1", "s1", True, 256)]
    assert roles.match_scores is None
    image = _program([_spec("image", "f32", [1, 1, 120, 160])], [_spec("kp", "f32", [1, 64, 2])])
    assert "two keypoint inputs" in matcher_roles(image)
    no_matches = _program(lg.inputs, [_spec("x", "f32", [1, 100])])
    assert "integer output [1, 100]" in matcher_roles(no_matches)


def test_padding_and_the_padding_matches_dropped() -> None:
    """An image with fewer keypoints than the matcher's K is padded; a match into the padding is none."""
    prog = _program([_spec("k0", "f32", [1, 4, 2]), _spec("k1", "f32", [1, 4, 2]), _spec("d0", "f32", [1, 4, 3]),
                     _spec("d1", "f32", [1, 4, 3])], [_spec("m", "i64", [1, 4]), _spec("s", "f32", [1, 4])])
    roles = matcher_roles(prog)
    assert not isinstance(roles, str)
    a = (np.ones((2, 2), np.float32), np.ones(2, np.float32), np.eye(3, dtype=np.float32)[:2], (10, 20))
    feeds = pair_feeds(roles, a, a)
    assert feeds["k0"].shape == (1, 4, 2) and (feeds["k0"][0, 2:] == [5, 10]).all()
    assert (feeds["d1"][0, 2:] == 0).all()
    m0, s0 = hloc_matches({"m": np.array([[1, 3, -1, 0]]), "s": np.array([[0.9, 0.8, 0, 0.7]])}, roles, 2, 2)
    assert m0.dtype == np.int16 and s0.dtype == np.float16 and m0.tolist() == [1, -1]
    assert kept_keypoints(np.array([0.1, 0.9, 0.5, 0.9]), 2).tolist() == [1, 3]
    with pytest.raises(Exception, match="input d1 takes 3"):
        pair_feeds(roles, a, (a[0], a[1], np.ones((2, 5), np.float32), a[3]))


def test_match_writes_what_hloc_reads_and_onnxruntime_computes(plans: dict[str, Path], pictures: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, err = spc("match", plans["sp"], plans["mnn"], pictures, "-o", out, "--viz", tmp_path / "viz",
                            "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in stdout.splitlines()]
    names = ["coffee.png", "db/astronaut.png", "db/crop.png"]
    assert [row["pair"] for row in lines[:-1]] == [[a, b] for i, a in enumerate(names) for b in names[i + 1:]]
    assert lines[-1]["summary"]["pairs"] == 3 and lines[-1]["summary"]["images"] == 3
    session = ort.InferenceSession(str(plans["mnn_onnx"]), providers=["CPUExecutionProvider"])
    with h5py.File(out / "features.h5", "r") as f:
        feats = {n: {k: f[n][k][()] for k in ("keypoints", "scores", "descriptors", "image_size")} for n in names}
    for n0, n1 in [("db/astronaut.png", "db/crop.png"), ("db/crop.png", "db/astronaut.png"),
                   ("coffee.png", "db/crop.png")]:
        matches, scores = get_matches(out / "matches.h5", n0, n1)
        a, b = feats[n0], feats[n1]
        n0_, n1_ = len(a["keypoints"]), len(b["keypoints"])
        assert 0 < n0_ <= K and a["descriptors"].shape == (256, n0_)
        assert matches[:, 0].max(initial=0) < n0_ and matches[:, 1].max(initial=0) < n1_
        assert len(scores) == len(matches)
        ref = session.run(None, {"kpts0": padded(a["keypoints"], a["image_size"] / 2),
                                 "kpts1": padded(b["keypoints"], b["image_size"] / 2),
                                 "desc0": padded(a["descriptors"].T, 0), "desc1": padded(b["descriptors"].T, 0)})[0][0]
        ref = np.where(ref < n1_, ref, -1)[:n0_]  # a match into the padding is none
        ours = np.full(n0_, -1)
        ours[matches[:, 0]] = matches[:, 1]
        assert index_set_f1(ours, ref) >= 0.95, (n0, n1)
    astro_crop = get_matches(out / "matches.h5", "db/astronaut.png", "db/crop.png")[0]
    assert len(astro_crop) >= 10  # the crop shares the astronaut's keypoints
    xy0, xy1 = feats["db/astronaut.png"]["keypoints"], feats["db/crop.png"]["keypoints"]
    shift = np.median(xy0[astro_crop[:, 0]] - xy1[astro_crop[:, 1]], axis=0)  # the crop's offset, (30, 20)
    assert np.abs(shift - [30, 20]).max() < 8, shift
    png = Image.open(tmp_path / "viz" / "db-astronaut.png__db-crop.png.png")
    assert png.size == (512 + 470, 512)
    # the API gives the same pair
    import spc as api

    m = api.match(plans["sp"], plans["mnn"], pictures / "db" / "astronaut.png", pictures / "db" / "crop.png")
    assert (m.matches == astro_crop).all() and len(m.features0.keypoints) == len(xy0)


def test_pairs_file_resume_and_refusals(plans: dict[str, Path], pictures: Path, tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("# hloc's pairs\ndb/crop.png db/astronaut.png\n\ndb/crop.png db/astronaut.png\n")
    out = tmp_path / "m.h5"
    code, stdout, err = spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", out)
    assert code == 0, err
    with h5py.File(out, "r") as f:
        assert list(f) == ["db-crop.png"] and list(f["db-crop.png"]) == ["db-astronaut.png"]
    with h5py.File(tmp_path / "features.h5", "r") as f:
        assert sorted(f) == ["db"] and sorted(f["db"]) == ["astronaut.png", "crop.png"]  # coffee: in no pair
    before = out.read_bytes()
    code, _, err = spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", out)
    one_line_error(code, err, "--skip-existing")
    code, stdout, err = spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", out,
                            "--skip-existing")
    assert code == 0 and "1 pair(s) kept" in stdout, err
    assert out.read_bytes() == before
    code, _, err = spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", out, "--overwrite")
    assert code == 0, err
    with h5py.File(tmp_path / "features.h5", "a") as f:  # a group edited since: one line, no traceback
        del f["db/crop.png/image_size"]
    code, _, err = spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", tmp_path / "m3.h5",
                       "--skip-existing")
    one_line_error(code, err, "group db/crop.png cannot be read back as features")
    # features.h5 written by `spc run` (every keypoint) is not read back as the matcher's best K (an
    # internal error once: the matcher got more keypoints than it takes)
    code, _, err = spc("run", plans["sp"], pictures, "--format", "h5", "-o", tmp_path / "r" / "features.h5")
    assert code == 0, err
    code, _, err = spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", tmp_path / "r" / "m.h5",
                       "--skip-existing")
    one_line_error(code, err, "made by another plan")
    # the 120x160 coffee has fewer than 64 keypoints: said once, after the pairs
    code, _, err = spc("match", plans["sp"], plans["mnn"], pictures / "coffee.png", pictures / "db" / "crop.png",
                       "-o", tmp_path / "c" / "c.h5")
    assert code == 0 and "coffee.png: fewer keypoints than the matcher's 64 a side; padded" in err, err
    for text, says in [("db/crop.png nothere.png\n", "pairs.txt:1: 'nothere.png' is not one of the input images"),
                       ("db/crop.png\n", "expected two image names"), ("db/crop.png db/crop.png\n", "with itself"),
                       ("# none\n", "holds no pair")]:
        pairs.write_text(text)
        fresh = tmp_path / "fresh.h5"
        code, _, err = spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", fresh)
        one_line_error(code, err, says)
        assert not fresh.exists()
    pairs.write_bytes(b"\xff\xfe db/crop.png\n")
    one_line_error(*spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", tmp_path / "x.h5")[::2],
                   "not UTF-8")
    # the plans the other way round, one image, an output over an input
    one_line_error(*spc("match", plans["mnn"], plans["sp"], pictures)[::2], "not an extractor's plan")
    one_line_error(*spc("match", plans["sp"], plans["sp"], pictures)[::2], "not a matcher's plan")
    one_line_error(*spc("match", plans["sp"], plans["mnn"], pictures / "coffee.png")[::2], "gives no pair")
    code, _, err = spc("match", plans["sp"], plans["mnn"], pictures, "--pairs", pairs, "-o", plans["sp"])
    assert code == 1 and err.startswith("spc: error:"), err


def test_descriptor_dimensions_must_agree(plans: dict[str, Path], pictures: Path, tmp_path: Path) -> None:
    from spc.compiler import compile_onnx
    from tests.corpus.mnn import export

    other = export(tmp_path / "mnn128.onnx", k=K, dim=128)
    compile_onnx(other, tmp_path / "mnn128.ttplan")
    code, _, err = spc("match", plans["sp"], tmp_path / "mnn128.ttplan", pictures, "-o", tmp_path / "m.h5")
    one_line_error(code, err, "256-dimensional")
    assert DType("i64").is_int


def test_a_fixed_k_extractor_read_by_shape() -> None:
    """DISK exported with a fixed K has no recognised keypoint extraction: its outputs get their
    roles from their shapes (lowering/roles.py), whatever their names and order; and none where
    the shapes do not say it."""
    from spc.lowering.roles import output_roles
    from spc.runtime.extraction import by_shape, has_keypoints
    from tests.conftest import ir

    text = """graph @t(%x: f32[1,8,16]) {{
  %p: i64[2] = const dense<[1, 0]>
  %k: f32[1,8,2] = onnx.Slice(%x, %z, %two, %two1) #k
  %s: f32[1,{n}] = onnx.ReduceMax(%x, %ax) {{keepdims = 0}} #s
  %d: f32[1,8,16] = onnx.Relu(%x) #d
  return %s, %d, %k
}}
"""
    consts = """  %z: i64[1] = const dense<[0]>
  %two: i64[1] = const dense<[2]>
  %two1: i64[1] = const dense<[2]>
  %ax: i64[1] = const dense<[2]>
"""
    g = ir(text.format(n=8).replace("  %p: i64[2] = const dense<[1, 0]>\n", consts))
    roles = output_roles(g)
    assert {n: r["spec"] for n, r in roles.items()} == {"k": "keypoints xy pixel f32 batch", "s": "scores batch",
                                                       "d": "descriptors nd batch"}
    assert has_keypoints(roles)
    assert "by their shapes, taken as (x, y) pixels" in (by_shape(roles) or "")  # what spc run and match say
    other = ir(text.format(n=8).replace("  %p: i64[2] = const dense<[1, 0]>\n", consts)
               .replace("%d: f32[1,8,16] = onnx.Relu(%x)", "%d: f32[1,8,2] = onnx.Relu(%k)"))
    assert not has_keypoints(output_roles(other)) and by_shape(output_roles(other)) is None


def test_match_on_the_mock_p150(ttnn_python: str, plans: dict[str, Path], pictures: Path, tmp_path: Path) -> None:
    """Both plans' ttnn programs through the real ttnn on the mock p150 (values are zeros there:
    no keypoints, so every match is none), the files written as on emu."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([ttnn_python, "-m", "spc.cli", "match", str(plans["sp"]), str(plans["mnn"]),
                           str(pictures / "db" / "astronaut.png"), str(pictures / "db" / "crop.png"), "-o",
                           str(tmp_path / "m.h5"), "--backend", "ttnn-mock"],
                          capture_output=True, text=True, check=False, cwd=root)
    assert done.returncode == 0, done.stderr
    assert "computes no values" in done.stderr
    matches, _ = get_matches(tmp_path / "m.h5", "astronaut.png", "crop.png")
    assert matches.shape[1] == 2


def test_normalized_keypoints_as_lightglue_normalises_them() -> None:
    """--keypoint-coords normalized: an export without image-size inputs takes the keypoints as
    LightGlue's normalize_keypoints gives them (centred, over half the larger side)."""
    prog = _program([_spec("a", "f32", [1, 3, 2]), _spec("b", "f32", [1, 3, 2]), _spec("c", "f32", [1, 3, 4]),
                     _spec("d", "f32", [1, 3, 4])], [_spec("m", "i64", [1, 3])])
    roles = matcher_roles(prog)
    assert not isinstance(roles, str) and roles.sides[0].size is None
    xy = np.array([[0, 0], [640, 480], [320, 240]], np.float32)
    side = (xy, np.ones(3, np.float32), np.ones((3, 4), np.float32), (640, 480))
    feeds = pair_feeds(roles, side, side, "normalized")
    np.testing.assert_allclose(feeds["a"][0], [[-1, -0.75], [1, 0.75], [0, 0]], atol=1e-6)
    np.testing.assert_allclose(pair_feeds(roles, side, side)["a"][0], xy)


def test_matches_as_pairs_as_lightglue_onnx_returns_them(plans: dict[str, Path], pictures: Path,
                                                         tmp_path: Path) -> None:
    """The same matcher returning matches [M, 2] and mscores [M] (M data-dependent, as
    LightGlue-ONNX's exports do): the same hloc matches as its matches0 form."""
    from spc.compiler import compile_onnx
    from tests.corpus.mnn import export

    src = export(tmp_path / "pairs.onnx", k=K, dim=256, threshold=0.8, pairs=True)
    compile_onnx(src, tmp_path / "pairs.ttplan")
    import spc as api

    a, b = pictures / "db" / "astronaut.png", pictures / "db" / "crop.png"
    got, want = api.match(plans["sp"], tmp_path / "pairs.ttplan", a, b), api.match(plans["sp"], plans["mnn"], a, b)
    assert len(want.matches) >= 10 and (got.matches0 == want.matches0).all()
    np.testing.assert_allclose(got.scores, want.scores, atol=1e-3)
