"""The lowered program: what a .ttplan holds besides its weights.

Three stages, run in order by the runtime:

* ``host_pre``: IR nodes (ONNX semantics) run on the host to prepare the device input;
* ``device``: ttnn calls, named and parameterised as the ttnn API spells them
  (``ttnn.conv2d`` with its ``conv_config`` fields, ``ttnn.max_pool2d``, ``ttnn.softmax`` ...),
  on tensors in ttnn's ``[1, 1, N*H*W, C]`` layout;
* ``host_post``: IR nodes run on the host on what the device returns (NonZero, GridSample ...).

In memory a call's arguments are typed (ttnn/: DataFormat, MemoryConfig, SliceConfig,
Conv2dConfig, ComputeConfig, PageLayout); on disk they are plain JSON (ints, floats, strings,
lists), written and read by :func:`encode` and :func:`decode_args` here and nowhere else. Tensors
are referenced by name and live in the plan's safetensors file.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from msgspec import Struct, field

from spc.ir.ops.spc_ops import as_ir_value, ir_typed
from spc.records import asdict
from spc.ttnn.configs import ComputeConfig, Conv2dConfig, PageLayout
from spc.ttnn.formats import DataFormat
from spc.ttnn.layout import Form, Layout, layout_of
from spc.ttnn.memory import MemoryConfig, SliceConfig


class TensorSpec(Struct):
    """A program input or output as the host sees it: name, IR element type, shape."""

    name: str
    dtype: str  # IR dtype name ("f32", "i64", ...)
    shape: list[int | str]


class ImageInput(Struct, frozen=True):
    """How a picture becomes the plan's image input (read from the model's graph at compile time:
    frontend/image_input.py): which axis of its [N, ., ., .] holds the channels, and what they are.
    ``grey``: the picture's luminance in every channel (SuperPoint's processor); ``rgb``: its red,
    green and blue (a model trained on colour, whose first convolutions read every channel);
    ``layout = "none"``: the input is no picture's (the model's axes do not say which are the
    rows, the columns and the channels): it takes arrays only."""

    layout: Literal["NCHW", "NHWC", "none"] = "NCHW"
    colour: Literal["grey", "rgb"] = "grey"

    def axes(self, shape: list[int | str]) -> tuple[int, int, int] | None:
        """(C, H, W) of an input of ``shape`` read so, or None when no picture fills it: not
        [1, ., ., .], no known layout, or more than :data:`MAX_IMAGE_CHANNELS` channels (a plan of
        another layout than it says)."""
        if self.layout == "none" or len(shape) != 4 or not all(isinstance(d, int) for d in shape) or shape[0] != 1:
            return None
        a, b, c = (int(d) for d in shape[1:])
        chw = (a, b, c) if self.layout == "NCHW" else (c, a, b)
        return chw if chw[0] <= MAX_IMAGE_CHANNELS and (self.colour == "grey" or chw[0] == 3) else None

    def frame_size(self, shape: list[int | str]) -> tuple[int, int]:
        """(H, W) of a frame of an input of ``shape`` (any batch) read so: the last two axes where
        no layout is known, (1, 1) for an input of rank < 2."""
        dims = [int(d) if isinstance(d, int) else 1 for d in shape]
        if len(dims) == 4 and self.layout == "NHWC":
            return dims[1], dims[2]
        return (dims[-2], dims[-1]) if len(dims) >= 2 else (1, 1)

    def arrange(self, picture: np.ndarray) -> np.ndarray:
        """The (H, W) or (H, W, C) ``picture`` (float32, the frame's size, its channels the input's)
        as one image's input: [1, C, H, W] or [1, H, W, C] float32."""
        hwc = picture if picture.ndim == 3 else picture[..., None]
        return np.ascontiguousarray((hwc if self.layout == "NHWC" else hwc.transpose(2, 0, 1))[None], dtype=np.float32)


MAX_IMAGE_CHANNELS = 4  # grey, a grey pair (SuperPoint-Open's two), colour, colour and alpha
DEFAULT_IMAGE = ImageInput()


class HostNode(Struct):
    """An IR op the host runs, by name, with its operands and attributes."""

    op: str  # "onnx.GridSample"
    name: str
    inputs: list[str | None]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


class TtOp(Struct):
    """One ttnn call. ``inputs`` are device tensor names; ``weights`` name plan tensors
    (uploaded once); ``args`` are the call's keyword arguments; ``dtype`` is the storage format
    of the result (set by the call's dtype argument where ttnn has one, else by its inputs)."""

    op: str  # "ttnn.conv2d"
    inputs: list[str]
    output: str
    args: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)
    source: str = ""  # the IR node this call comes from
    dtype: DataFormat = DataFormat.BFLOAT16  # how the output is stored on the device
    block: str = ""  # the precision block of that node (ttnn/precision.py)
    shape: list[int] = field(default_factory=list)  # the output, in ttnn's device layout
    extra_outputs: list[str] = field(default_factory=list)  # further results (ttnn.topk's indices)
    extra_dtypes: list[DataFormat] = field(default_factory=list)  # and their formats

    @property
    def results(self) -> list[str]:
        """Every tensor the call produces, in the order the call returns them."""
        return [self.output, *self.extra_outputs]

    def bind(self, env: dict[str, Any], result: Any) -> None:
        """Store the call's ``result`` in ``env`` under its names (a tuple when there are several)."""
        if self.extra_outputs:
            env.update(zip(self.results, result))
        else:
            env[self.output] = result

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "inputs": list(self.inputs), "output": self.output, "args": encode(self.args),
                "weights": dict(self.weights), "source": self.source, "dtype": self.dtype.value, "block": self.block,
                "shape": [int(d) for d in self.shape], "extra_outputs": list(self.extra_outputs),
                "extra_dtypes": [d.value for d in self.extra_dtypes]}

    def stock_calls(self) -> list[TtOp]:
        """The stock ttnn calls this call is: itself, or a fused kernel's composed calls (kernels/)."""
        if self.op != "spc.kernel":
            return [self]
        return [TtOp.from_step(c, self.source, self.block) for c in self.args["composed"]]

    @staticmethod
    def from_step(step: dict[str, Any], source: str, block: str) -> TtOp:
        """One of the stock calls a fused kernel replaces (``args["composed"]``: kernels/), as a call."""
        return TtOp.from_json({**step, "source": source, "block": block})

    @staticmethod
    def from_json(d: dict[str, Any]) -> TtOp:
        return TtOp(d["op"], list(d["inputs"]), d["output"], decode_args(d.get("args", {})), dict(d.get("weights", {})),
                    d.get("source", ""), DataFormat.parse(d.get("dtype", "bfloat16")), d.get("block", ""),
                    list(d.get("shape", [])), list(d.get("extra_outputs", [])),
                    [DataFormat.parse(x) for x in d.get("extra_dtypes", [])])


def numel(shape: list[int]) -> int:
    return math.prod(int(d) for d in shape)


class DeviceTensor(Struct):
    """A tensor crossing the host/device boundary: its IR name and shape, and its device layout
    (``form``: NHWC = ttnn's conv layout [1, 1, N*H*W, C], PLAIN = the IR shape; ttnn/layout.py)."""

    name: str
    shape: list[int]
    device_shape: list[int]
    form: Form = Form.NHWC
    dtype: str = "f32"  # the IR element type; booleans are 0/1 on the device

    def __post_init__(self) -> None:
        self.form = Form(self.form)  # read from JSON as its spelling

    @property
    def layout(self) -> Layout:
        return layout_of(self.form, self.shape)

    def to_host(self, y: np.ndarray, copy: bool = True) -> np.ndarray:
        """The device result ``y`` as the IR value it holds: its shape, its element type (0/1 ->
        bool); without ``copy`` possibly a strided view of ``y``."""
        return as_ir_value(y, self.form.value, self.shape, self.dtype, copy)

    def paired(self, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The device result ``y`` (typed as :meth:`to_host` types it) and an IR value ``x`` of this
        tensor's shape, as views of one shape in the device's element order: no transposed copy,
        and a comparison reads them ~4x faster than in the IR's order (1.2M elements: 2 ms, not 9)."""
        lay = self.layout
        return ir_typed(lay.device_view(y), self.dtype), lay.in_device_order(x)


class DeviceConstant(Struct):
    """A constant the program's calls read (a broadcast operand, a per-channel scale): the plan
    tensor ``weight`` reshaped to ``device_shape``, put on the device once in ``dtype`` before the
    first frame and kept there, as conv weights are."""

    name: str
    weight: str
    device_shape: list[int]
    dtype: DataFormat = DataFormat.BFLOAT16


class Program(Struct):
    """The contract between compiler and runtime: host stages, the device calls, their tensors."""

    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    host_pre: list[HostNode]
    device_inputs: list[DeviceTensor]
    device_ops: list[TtOp]
    device_outputs: list[DeviceTensor]
    host_post: list[HostNode]
    # device tensors worth reading for inspection and checking, by role ("score_map", ...)
    probes: dict[str, DeviceTensor] = field(default_factory=dict)
    # with a compact read-back, what a frame reads instead when it overflows: dense device
    # tensors and the host nodes that finish from them (lowering/readback.py)
    fallback_outputs: list[DeviceTensor] = field(default_factory=list)
    fallback_post: list[HostNode] = field(default_factory=list)
    constants: list[DeviceConstant] = field(default_factory=list)
    # what each graph output is, by output name, when the graph says so ("keypoints", "score_map" ...;
    # lowering/roles.py); the runtime and the CLI never rely on output names
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)
    # every IR value the device stage holds, by IR value name: the device tensor holding it
    # (``DeviceTensor.name``: the same name but for an alias), its IR shape and layout. The
    # per-layer comparison (tuning/per_layer.py) matches tensors to the source model by this
    # record, never by how names look; tensors not in it are the lowering's own (a fused op's
    # insides, layout and memory copies)
    values: dict[str, DeviceTensor] = field(default_factory=dict)
    # the device inputs uploaded in another format than bfloat16, by name (a matcher's keypoint
    # positions: bf16 holds a 640-pixel coordinate to 4 pixels); an image is bf16
    input_storage: dict[str, DataFormat] = field(default_factory=dict)
    # how a picture fills the first input (frontend/image_input.py); NCHW grey, the default, is
    # left out of program.json, as plans were written before the field existed
    image: ImageInput = DEFAULT_IMAGE

    def input_format(self, name: str) -> DataFormat:
        """The format the upload writes device input ``name`` in."""
        return self.input_storage.get(name, DataFormat.BFLOAT16)

    def frees(self, keep: set[str]) -> list[list[str]]:
        """For each device call, the tensors no later call reads (except ``keep``): what a
        runtime frees right after it."""
        last: dict[str, int] = {}
        for i, op in enumerate(self.device_ops):
            for name in op.inputs:
                last[name] = i
        out: list[list[str]] = [[] for _ in self.device_ops]
        constants = {c.name for c in self.constants}  # they live as long as the program
        for name, i in last.items():
            if name not in keep and name not in constants:
                out[i].append(name)
        return out

    def to_json(self) -> dict[str, Any]:
        # the calls have their own spelling: asdict would convert them only to be thrown away
        d = {name: asdict(getattr(self, name)) for name in self.__struct_fields__ if name != "device_ops"}
        if not d["input_storage"]:  # an image plan's program.json as before the field existed
            del d["input_storage"]
        if self.image == DEFAULT_IMAGE:
            del d["image"]
        d = encode(d)
        d["device_ops"] = [op.to_json() for op in self.device_ops]  # JSON-safe already: not encoded twice
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Program:
        ops = [TtOp.from_json(o) for o in d["device_ops"]]
        d = decode({k: v for k, v in d.items() if k != "device_ops"})
        return Program(
            inputs=[TensorSpec(**t) for t in d["inputs"]],
            outputs=[TensorSpec(**t) for t in d["outputs"]],
            host_pre=[HostNode(**n) for n in d["host_pre"]],
            device_inputs=[DeviceTensor(**t) for t in d["device_inputs"]],
            device_ops=ops,
            device_outputs=[DeviceTensor(**t) for t in d["device_outputs"]],
            host_post=[HostNode(**n) for n in d["host_post"]],
            probes={k: DeviceTensor(**v) for k, v in d.get("probes", {}).items()},
            fallback_outputs=[DeviceTensor(**t) for t in d.get("fallback_outputs", [])],
            fallback_post=[HostNode(**n) for n in d.get("fallback_post", [])],
            constants=[DeviceConstant(c["name"], c["weight"], list(c["device_shape"]), DataFormat.parse(c["dtype"]))
                       for c in d.get("constants", [])],
            roles=d.get("roles", {}),
            values={k: DeviceTensor(**v) for k, v in d.get("values", {}).items()},
            input_storage={k: DataFormat.parse(v) for k, v in d.get("input_storage", {}).items()},
            image=ImageInput(**d["image"]) if "image" in d else DEFAULT_IMAGE,
        )


_PLAIN = frozenset({str, int, float, bool, type(None)})


def encode(x: Any) -> Any:
    """JSON-safe: typed call arguments as their ttnn-facing spellings, numpy arrays as
    {"__array__": dtype, "shape": ..., "data": [...]}."""
    if type(x) in _PLAIN:  # most of a program: asked first
        return x
    if isinstance(x, TtOp):
        return x.to_json()
    if isinstance(x, (SliceConfig, Conv2dConfig, ComputeConfig)):
        return x.to_json()
    if isinstance(x, MemoryConfig):
        return x.key
    if isinstance(x, (DataFormat, PageLayout)):
        return x.value
    if isinstance(x, np.ndarray):
        return {"__array__": x.dtype.name, "shape": list(x.shape), "data": x.reshape(-1).tolist()}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {k: encode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [encode(v) for v in x]
    return x


# call arguments read back as types, by their ttnn keyword
_TYPED_ARGS = {"dtype": DataFormat.parse, "layout": PageLayout, "memory_config": MemoryConfig.from_key,
               "slice_config": SliceConfig.from_json, "conv_config": Conv2dConfig.from_json,
               "compute_config": ComputeConfig.from_json}


def decode_args(args: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments from the plan's JSON: the typed ones (_TYPED_ARGS) as their types."""
    out = {}
    for k, v in args.items():
        out[k] = _TYPED_ARGS[k](v) if k in _TYPED_ARGS and v is not None else decode(v)
    return out


def decode(x: Any) -> Any:
    if isinstance(x, dict):
        if "__array__" in x:
            return np.asarray(x["data"], dtype=x["__array__"]).reshape(x["shape"])
        return {k: decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode(v) for v in x]
    return x
