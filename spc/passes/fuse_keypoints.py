"""fuse-keypoints: recognise the host post-processing as SuperPoint's keypoint extraction.

Before (the HF export: about 80 host nodes)::

    %select_1 = onnx.Squeeze(%where_2, ...) @host-post
    %gt_2 = onnx.Greater(%select_1, %val_51) @host-post
    %val_52 = onnx.NonZero(%gt_2) @host-post
    ...
    %descriptors = onnx.ScatterElements(...) @host-post
    return %keypoints, %scores, %descriptors, %mask

After::

    %keypoints, %scores, %descriptors, %mask = spc.Keypoints(%where_2, %div) {border = 4, cell = 8,
        limit_x = 640, limit_y = 480, max_keypoints = -1, mode = "threshold", outputs = ["keypoints xy norm f32 batch",
        "scores batch", "descriptors nd batch", "mask i32 batch"], threshold = 0.004999999888241291} @host-post

The region is every host node after the device stage; what enters it from the device must be the
NMS map (spc.Nms) and a descriptor map 1/cell of its size. It is recognised by what it computes,
not by its spelling (ir/ops/keypoints.py says what the op computes), one question at a time, each
answered by running the region on trial maps (one module each in passes/keypoints/):

1. the selection mode: a count that depends on the data (threshold) or a fixed K (top-K);
2. each output's role and layout, from a few distinct peaks well inside the map: keypoints as
   (x, y) or (y, x), in pixels or divided by the size, float or integer, with or without the batch
   axis; scores; descriptors (N, D) or (D, N); a mask of ones;
3. the threshold, by bisection over float32 values of one peak (threshold mode);
4. the kept window, by moving a peak across the middle row and column (HF keeps only the near
   borders: it compares with 8x the map's size; fixed-K exports usually cut all four);
5. the fill of the cut border (fixed mode) and the keypoint limit (threshold mode: how many of a
   dense random map's thousands of peaks it returns);
6. agreement with the op on random maps, every output exactly (the limit's map among them).

A batch plan (passes/batch_images.py) has one copy of the post-processing per image: when the whole
region is not one extraction and several NMS maps enter it, each map's region (the nodes that read
it and no other map, with what they read that reads no map: the image's slice of the batched
descriptors, which moves to the device) is recognised alone, one spc.Keypoints per image; the
stacking of the images' results stays as it is (lowering/roles.py reads the roles through it).

The first question that finds no answer is the reason the fusion did not fire (``why_not`` in the
pass summary); the graph is then left as it was and the device maps are read densely. A single
op is what lets the lowering compute the keypoints' top-K and descriptors on the device and read
back only those (lowering/readback.py).
"""

from __future__ import annotations

from spc.ir.graph import Graph, Node, Placement, Value
from spc.ir.ops import get
from spc.lowering.registry import device_support
from spc.passes.keypoints.recognise import recognise
from spc.passes.keypoints.trial import NoMatch, image_row, through_views
from spc.passes.manager import Pass, PassContext, PassResult


# -- a batch: one extraction per image ----------------------------------------------------------
def image_regions(post: list[Node], g: Graph) -> list[tuple[list[Node], list[Value]]]:
    """The host post-processing of a batch plan, image by image (passes/batch_images.py copies it
    once per image): for each NMS map that enters it, the nodes that read it and no other map,
    with the nodes they read that read no map at all (the image's slice of the descriptors),
    and the values leaving those nodes. Empty when fewer than two NMS maps enter."""
    members = {id(n) for n in post}
    entering = {id(v): v for n in post for v in n.inputs
                if v is not None and v.producer is not None and v.producer.placement is Placement.DEVICE}
    maps = [v for v in entering.values() if (p := through_views(v)) is not None and p.op.name == "spc.Nms"]
    if len(maps) == 1 and maps[0].type.shape[0] != 1:  # one batched NMS map: each image's row of it
        maps = [o for u in maps[0].consumers() if id(u) in members and image_row(u) for o in u.outputs]
    if len(maps) < 2:
        return []
    below: list[set[int]] = []
    for m in maps:
        seen: set[int] = set()
        stack = [u for u in m.consumers() if id(u) in members]
        while stack:
            n = stack.pop()
            if id(n) not in seen:
                seen.add(id(n))
                stack.extend(u for o in n.outputs for u in o.consumers() if id(u) in members)
        below.append(seen)
    reached = [sum(id(n) in b for b in below) for n in post]
    regions = []
    for own in below:
        region = {id(n) for n, r in zip(post, reached) if r == 1 and id(n) in own}
        stack = [v.producer for n in post if id(n) in region for v in n.inputs if v is not None]
        while stack:
            p = stack.pop()
            if p is not None and id(p) in members and id(p) not in region and not any(id(p) in b for b in below):
                region.add(id(p))
                stack.extend(v.producer for v in p.inputs if v is not None)
        # the sizes of its results that the stacking reads (Shape) stay outside: they are no result
        region -= {id(n) for n in post if n.op.name in ("onnx.Shape", "onnx.Size") and
                   all(id(u) not in region for o in n.outputs for u in o.consumers())}
        nodes = [n for n in post if id(n) in region]
        outputs = [o for n in nodes for o in n.outputs
                   if o in g.outputs or any(id(u) not in region for u in o.consumers())]
        regions.append((nodes, outputs))
    return regions


def _image_slices_to_device(nodes: list[Node]) -> list[Node]:
    """An image's slice of a batched device map (its descriptors), computed on the device, so that
    the image's region reads its own maps; the slices moved (put back if the region is not
    recognised)."""
    moved = []
    for n in nodes:
        x = n.inputs[0] if n.inputs else None
        if n.op.name == "onnx.Slice" and x is not None and x.producer is not None and \
                x.producer.placement is Placement.DEVICE and x.type.rank and x.type.shape[0] != 1 and \
                n.output.type.is_static and n.output.type.shape[0] == 1 and device_support(n) is None:
            n.placement = Placement.DEVICE
            moved.append(n)
    return moved


class FuseKeypoints(Pass):
    name = "fuse-keypoints"
    summary = "recognise the host post-processing as SuperPoint keypoint extraction (one op)"
    requires = ("partition-host-device",)
    explains = (name,)
    creates = ("spc.Keypoints",)

    def run(self, g: Graph, ctx: PassContext) -> PassResult:
        post = [n for n in g.nodes if n.placement is Placement.HOST_POST]
        if not post:
            return PassResult(False, {"recognised": 0, "why_not": "no host post-processing (the device outputs are the "
                                                                  "model's)"})
        attempt = ctx.attempt(self.name, f"the host post-processing ({len(post)} node(s))")
        try:
            found = [recognise(post, g, attempt)]
        except (NoMatch, ValueError, IndexError, KeyError, TypeError) as exc:
            why = str(exc) if isinstance(exc, NoMatch) else f"trying the region failed ({type(exc).__name__}: {exc})"
            found = self._per_image(post, g)
            if isinstance(found, str):
                why += found
                if attempt:
                    attempt.stopped(why)
                ctx.note(f"fuse-keypoints: the host post-processing is not recognised as SuperPoint's keypoint "
                         f"extraction: {why}; the device maps are read densely")
                return PassResult(False, {"recognised": 0, "why_not": why})
        for i, (score, desc, outputs, attrs) in enumerate(found):
            node = g.make_node(get("spc.Keypoints"), [score, desc], attrs, out_types=[v.type for v in outputs],
                               name="keypoints" if len(found) == 1 else f"keypoints/image{i}",
                               out_names=[v.name + "_fused" for v in outputs])
            node.placement = Placement.HOST_POST
            for old, new in zip(outputs, node.outputs):
                g.replace_all_uses(old, new)
        if attempt:
            what = "spc.Keypoints replaces" if len(found) == 1 else f"{len(found)} spc.Keypoints (per image) replace"
            attempt.fired(f"{what} the post-processing's {len(post)} node(s)")
        for n in reversed(post):  # consumers first
            if n.placement is Placement.HOST_POST and all(not o.uses and o not in g.outputs for o in n.outputs):
                g.remove_node(n)
        g.toposort()  # an image's op reads its slice, now among the device nodes
        g.remove_unused_constants()
        shown = {k: v for k, v in found[0][3].items() if k != "outputs"}
        return PassResult(True, {"recognised": len(found), "replaced": len(post), **shown})

    @staticmethod
    def _per_image(post: list[Node], g: Graph) -> list[tuple[Value, Value, list[Value], dict]] | str:
        """Each image's extraction of a batch plan (image_regions), or why not (appended to the
        whole region's reason)."""
        regions = image_regions(post, g)
        if not regions:
            return ""
        found, moved = [], []
        try:
            for i, (nodes, outputs) in enumerate(regions):
                slices = _image_slices_to_device(nodes)
                moved += slices
                try:
                    found.append(recognise([n for n in nodes if n not in slices], g, None, outputs))
                except NoMatch as exc:
                    raise NoMatch(f"; image {i} of {len(regions)} alone: {exc}") from None
        except (NoMatch, ValueError, IndexError, KeyError, TypeError) as exc:
            for n in moved:
                n.placement = Placement.HOST_POST
            return str(exc) if isinstance(exc, NoMatch) else f"; image by image: {type(exc).__name__}: {exc}"
        return found
