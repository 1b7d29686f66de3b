"""How a picture fills a model's image input (frontend/image_input.py, plan/program.py ImageInput):
the layout and the colour read from the graph, and `spc run`, `spc check`, the API and --ray
reading pictures so. The models are torch.onnx's exports of small modules written as their
toolchains' users write them (channels last, as TensorFlow and JAX models take an image; RGB, as
DISK takes one; grey through a channel select, as Hugging Face's SuperPoint does), each checked
against onnxruntime fed the picture as the model's own users would prepare it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from spc.frontend.image_input import image_input
from spc.frontend.onnx_import import import_onnx
from spc.plan.program import DEFAULT_IMAGE, ImageInput
from spc.runtime.inputs import load_input
from tests.conftest import members, one_line_error, spc, write_members

H, W = 24, 32
RNG = np.random.default_rng(5)


def _export(module, shape: list[int], path: Path) -> Path:
    import torch

    torch.onnx.export(module.eval(), (torch.rand(*shape),), str(path), input_names=["image"], output_names=["y"],
                      dynamo=True, opset_version=18)
    return path


def _modules():
    import torch

    class ChannelsLast(torch.nn.Module):  # as a Keras or Flax model takes its image: [N, H, W, C]
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(c, 4, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.conv(x.permute(0, 3, 1, 2)))

    class Colour(torch.nn.Module):  # DISK's first convolution reads RGB
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x)

    class FirstChannel(torch.nn.Module):  # HF SuperPoint: pixel_values[:, 0, :, :][:, None]
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x[:, 0, :, :][:, None])

    class OwnGrey(torch.nn.Module):  # a model that turns colour to grey itself reads every channel
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)

        def forward(self, x):
            w = torch.tensor([0.299, 0.587, 0.114]).reshape(1, 3, 1, 1)
            return self.conv((x * w).sum(1, keepdim=True))

    return ChannelsLast, Colour, FirstChannel, OwnGrey


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ChannelsLast, Colour, FirstChannel, OwnGrey = _modules()
    d = tmp_path_factory.mktemp("image_input")
    return {"nhwc_grey": _export(ChannelsLast(1), [1, H, W, 1], d / "nhwc_grey.onnx"),
            "nhwc_rgb": _export(ChannelsLast(3), [1, H, W, 3], d / "nhwc_rgb.onnx"),
            "rgb": _export(Colour(), [1, 3, H, W], d / "rgb.onnx"),
            "first_channel": _export(FirstChannel(), [1, 3, H, W], d / "first.onnx"),
            "own_grey": _export(OwnGrey(), [1, 3, H, W], d / "own_grey.onnx")}


@pytest.mark.parametrize("name, want", [
    ("nhwc_grey", ImageInput("NHWC", "grey")), ("nhwc_rgb", ImageInput("NHWC", "rgb")),
    ("rgb", ImageInput("NCHW", "rgb")), ("first_channel", DEFAULT_IMAGE), ("own_grey", ImageInput("NCHW", "rgb"))])
def test_the_convention_is_read_from_the_exported_graph(exports: dict[str, Path], name: str, want: ImageInput) -> None:
    found, note = image_input(import_onnx(exports[name]))
    assert found == want
    assert (note is None) == (want == DEFAULT_IMAGE), note


def _graph(nodes, shape: list[int], inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _save(tmp_path: Path, model: onnx.ModelProto) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path


def _read(tmp_path: Path, model: onnx.ModelProto) -> tuple[ImageInput, str | None]:
    return image_input(import_onnx(_save(tmp_path, model)))


def test_a_resize_before_the_first_convolution_leaves_the_small_axis(tmp_path: Path) -> None:
    w = numpy_helper.from_array(RNG.standard_normal((4, 1, 3, 3)).astype(np.float32), "w")
    scales = numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "s")
    t = helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2])
    r = helper.make_node("Resize", ["t", "", "s"], ["r"], mode="nearest")
    c = helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])
    assert _read(tmp_path, _graph([t, r, c], [1, 48, 64, 1], [w, scales]))[0] == ImageInput("NHWC", "grey")


def test_axes_nothing_tells_apart_take_arrays_only(tmp_path: Path) -> None:
    found, note = _read(tmp_path, _graph([helper.make_node("Relu", ["x"], ["y"])], [1, 8, 8, 8]))
    assert found.layout == "none" and note is not None and "arrays" in note


def _picture(path: Path, colour: bool) -> Path:
    rgb = (RNG.random((H + 7, W + 5, 3)) * 255).astype(np.uint8)  # not the plan's size: resized
    Image.fromarray(rgb if colour else rgb[..., 0]).save(path)
    return path


def _as_users_prepare(picture: Path, layout: str, colour: bool, channels: int) -> np.ndarray:
    """The input as the model's own users make it: PIL's resize, [0, 1], grey repeated."""
    im = Image.open(picture).convert("RGB" if colour else "L").resize((W, H), Image.BILINEAR)
    a = np.asarray(im, np.float32) / 255
    a = a if colour else np.repeat(a[..., None], channels, axis=2)
    return (a if layout == "NHWC" else a.transpose(2, 0, 1))[None].astype(np.float32)


@pytest.mark.parametrize("name, layout, colour, channels", [
    ("nhwc_grey", "NHWC", False, 1), ("nhwc_rgb", "NHWC", True, 3), ("rgb", "NCHW", True, 3),
    ("first_channel", "NCHW", False, 3)])
def test_spc_run_feeds_the_picture_as_the_model_takes_it(exports: dict[str, Path], tmp_path: Path, name: str,
                                                        layout: str, colour: bool, channels: int) -> None:
    plan = tmp_path / f"{name}.ttplan"
    code, _, err = spc("compile", exports[name], "-o", plan)
    assert code == 0, err
    picture = _picture(tmp_path / "in.png", colour=True)
    code, _, err = spc("run", plan, picture, "-o", tmp_path / "out.npz")
    assert code == 0, err
    ours = np.load(tmp_path / "out.npz")["y"]
    session = ort.InferenceSession(str(exports[name]), providers=["CPUExecutionProvider"])
    want = session.run(None, {"image": _as_users_prepare(picture, layout, colour, channels)})[0]
    assert ours.shape == want.shape
    assert np.corrcoef(ours.ravel(), want.ravel())[0, 1] > 0.999
    # the API reads a picture (a file, a PIL image, an array) the same way
    import spc as api

    with api.load(plan) as model:
        for given in (picture, Image.open(picture), np.asarray(Image.open(picture))):
            got = model.outputs(given)["y"]
            assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.999


@pytest.mark.parametrize("layout, colour, channels", [("NHWC", False, 1), ("NHWC", True, 3), ("NCHW", True, 3),
                                                       ("NCHW", False, 2)])
def test_load_input_reads_as_the_plan_says(tmp_path: Path, layout: str, colour: bool, channels: int) -> None:
    """What `spc check`, `spc bench`, the bisection and the precision search's calibration read."""
    picture = _picture(tmp_path / "in.png", colour=True)
    shape = [1, H, W, channels] if layout == "NHWC" else [1, channels, H, W]
    got = load_input(picture, shape, ImageInput(layout, "rgb" if colour else "grey"))
    want = _as_users_prepare(picture, layout, colour, channels)
    assert got.shape == want.shape and np.abs(got - want).max() < 2 / 255  # resized in float, not in bytes


def test_a_plan_without_its_image_layout_is_not_fed_a_picture_it_cannot_hold(exports: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    """A plan written before plans said their image layout reads as NCHW: a channels-last input of
    [1, H, W, 1] then has H channels. It was read as a picture W pixels wide and 1 high, broadcast
    over H channels (a wrong answer, said only as a resize note); now it is one line."""
    plan = tmp_path / "nhwc.ttplan"
    assert spc("compile", exports["nhwc_grey"], "-o", plan)[0] == 0
    data = members(plan)
    program = json.loads(data["program.json"])
    assert program["image"] == {"layout": "NHWC", "colour": "grey"}
    del program["image"]
    old = write_members(tmp_path / "old.ttplan", {**data, "program.json": json.dumps(program).encode()})
    code, _, err = spc("run", old, _picture(tmp_path / "in.png", colour=False), "-o", tmp_path / "out.npz")
    one_line_error(code, err, "which no picture fills")
    assert not (tmp_path / "out.npz").exists()


def test_default_plans_are_written_as_before() -> None:
    """NCHW grey, SuperPoint's own, is left out of program.json: such plans are byte for byte what
    they were before the field existed (scripts/plan_matrix.py)."""
    from spc.plan.program import Program

    p = Program([], [], [], [], [], [], [])
    assert "image" not in p.to_json()
    p.image = ImageInput("NHWC", "grey")
    assert p.to_json()["image"] == {"layout": "NHWC", "colour": "grey"}
    assert Program.from_json({**p.to_json(), "device_ops": []}).image == ImageInput("NHWC", "grey")


def _conv_weight(cin: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.normal(0, 0.3, (4, cin, 3, 3)).astype(np.float32), "w")


def test_what_the_image_reaches_beside_the_first_convolution_is_not_read_as_colour(tmp_path: Path) -> None:
    """HF's first-channel select, and the image's Shape used after the convolution (a keypoint
    scaling): only the way to the first convolution is run, so the model still reads grey."""
    idx = numpy_helper.from_array(np.array(0, np.int64), "idx")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             helper.make_node("Unsqueeze", ["g", "axes"], ["u"]),
             helper.make_node("Conv", ["u", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["x"], ["s"], start=3, end=4),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["c", "sf"], ["y"])]
    assert _read(tmp_path, _graph(nodes, [1, 3, 24, 32], [idx, axes, _conv_weight(1)]))[0] == DEFAULT_IMAGE


def test_what_constants_compute_on_the_way_to_the_first_convolution_is_run_too(tmp_path: Path) -> None:
    """A statically quantized export's grey conversion: the image times factors that a
    DequantizeLinear makes of uint8 constants, summed over the channels, then the convolution. The
    graph is read as imported (its constants not yet folded): the factors are computed on the way,
    and the model reads all three channels (before: "cannot be run from the image alone", arrays
    only; found by `make corpus-derived` on MagicLeap's 3-channel export quantized)."""
    inits = [numpy_helper.from_array(np.array([77, 150, 29], np.uint8).reshape(1, 3, 1, 1), "kq"),
             numpy_helper.from_array(np.array(1 / 256, np.float32), "ks"),
             numpy_helper.from_array(np.array([1], np.int64), "axes"), _conv_weight(1)]
    nodes = [helper.make_node("DequantizeLinear", ["kq", "ks"], ["k"]),
             helper.make_node("Mul", ["x", "k"], ["m"]),
             helper.make_node("ReduceSum", ["m", "axes"], ["grey"], keepdims=1),
             helper.make_node("Conv", ["grey", "w"], ["y"], pads=[1, 1, 1, 1])]
    found, note = _read(tmp_path, _graph(nodes, [1, 3, 24, 32], inits))
    assert found == ImageInput("NCHW", "rgb"), note


def test_with_no_convolution_the_outputs_say_which_channels_are_read(tmp_path: Path) -> None:
    """Three channels and no convolution or pool to ask (a patchifying model): its outputs read all
    three (colour), or the first only (grey); what needs more than the image cannot be told."""
    shape = numpy_helper.from_array(np.array([1, 3 * 24 * 32], np.int64), "shape")
    starts, ends, axes = (numpy_helper.from_array(np.array([v], np.int64), n) for n, v in
                          (("starts", 0), ("ends", 1), ("axes", 1)))
    patchify = _graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], [1, 3, 24, 32], [shape])
    assert _read(tmp_path, patchify)[0] == ImageInput("NCHW", "rgb")
    first = _graph([helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])], [1, 3, 24, 32],
                   [starts, ends, axes])
    assert _read(tmp_path, first)[0] == DEFAULT_IMAGE
    g = helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 32]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 24, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    found, _ = image_input(import_onnx(_save(tmp_path, helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9))))
    assert found.layout == "none"  # two inputs: a matcher's kind, no picture


def test_a_batch_export_reads_each_picture(tmp_path: Path) -> None:
    """A model exported for two images at once takes two pictures a run, each read as one."""
    src = tmp_path / "b2.onnx"
    onnx.save(_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [2, 1, H, W],
                     [_conv_weight(1)]), src)
    assert image_input(import_onnx(src))[0] == DEFAULT_IMAGE
    plan = tmp_path / "b2.ttplan"
    assert spc("compile", src, "-o", plan)[0] == 0
    pictures = [_picture(tmp_path / f"{k}.png", colour=True) for k in range(2)]
    code, _, err = spc("run", plan, *pictures, "-o", tmp_path / "out")
    assert code == 0, err


def test_an_empty_input_is_no_picture(tmp_path: Path) -> None:
    """A hostile model's input of zero images (fuzz seed 50095 divided by its size): no picture,
    no error here; the compile's own checks answer for the model."""
    found, note = _read(tmp_path, _graph([helper.make_node("Relu", ["x"], ["y"])], [0, 3, 8, 8]))
    assert found.layout == "none" and note is None
