"""The questions in order: what spc.Keypoints a host post-processing is, or why it is none."""

from __future__ import annotations

from collections.abc import Callable

from spc.ir.graph import Graph, Node, Placement, Value
from spc.ir.ops.keypoints import OutputSpec
from spc.passes.explain import Attempt
from spc.passes.keypoints import agreement
from spc.passes.keypoints import window as windows
from spc.passes.keypoints.roles import roles
from spc.passes.keypoints.threshold import threshold
from spc.passes.keypoints.trial import NoMatch, Trial, first, kept_beside_anchor, through_views


def recognise(post: list[Node], g: Graph, attempt: Attempt | None = None,
              outputs: list[Value] | None = None) -> tuple[Value, Value, list[Value], dict]:
    """The NMS map, the descriptor map, the outputs and the attributes of spc.Keypoints; NoMatch
    with the reason otherwise. ``attempt`` hears each finding (``--explain``).

    The questions are asked with many peaks per run first (a few runs in all); where that finds no
    answer - a keypoint limit can cut what many peaks show - they are asked again one peak at a
    time, and the reason given is that slower search's."""
    heard: list[str] = []
    try:
        found = _recognise(post, g, heard.append, True, outputs)
    except NoMatch:
        return _recognise(post, g, attempt.step if attempt is not None else None, False, outputs)
    for text in heard:
        if attempt is not None:
            attempt.step(text)
    return found


def _recognise(post: list[Node], g: Graph, hear: Callable[[str], None] | None,
               fast: bool, outputs: list[Value] | None = None) -> tuple[Value, Value, list[Value], dict]:

    def found(text: str) -> None:
        if hear is not None:
            hear(text)

    entering = {id(v): v for n in post for v in n.inputs
                if v is not None and v.producer is not None and v.producer.placement is Placement.DEVICE}
    if outputs is None:
        outputs = [v for v in g.outputs if v.producer is not None and v.producer.placement is Placement.HOST_POST]
    if not outputs:
        raise NoMatch("no graph output comes from the host post-processing")
    maps = [v for v in entering.values() if v.type.is_static and v.type.dtype.is_float]
    if len(entering) != 2 or len(maps) != 2:
        raise NoMatch(f"{len(entering)} device value(s) enter the host post-processing: expected the NMS map and the "
                      "descriptor map")
    score = next((v for v in maps if (p := through_views(v)) is not None and p.op.name == "spc.Nms"), None)
    if score is None:
        raise NoMatch("no NMS map (spc.Nms) enters the host post-processing")
    desc = next(v for v in maps if v is not score)
    found(f"maps: %{score.name} (NMS) and %{desc.name} (descriptors)")
    sh, ds = score.type.static_shape, desc.type.static_shape
    if desc.type.rank != 4 or ds[0] != 1 or any(d != 1 for d in sh[:-2]) or sh[-2] % ds[-2] or \
            sh[-2] // ds[-2] != sh[-1] // ds[-1] or sh[-1] % ds[-1]:
        raise NoMatch(f"the maps {list(sh)} and {list(ds)} are not an image's scores and its descriptor cells")
    trial = Trial(post, score, desc, outputs)
    fixed = all(v.type.is_static for v in outputs)
    if fixed:
        trial.uneven()
    specs = roles(trial, fixed)
    found(f"outputs: {', '.join(specs)}")
    attrs: dict = {"cell": trial.cell, "outputs": specs, "mode": "fixed" if fixed else "threshold"}
    found(f"mode: {attrs['mode']} ({'static' if fixed else 'data-dependent'} output shapes), cell {trial.cell}")
    if fixed:
        kp = outputs[[OutputSpec.parse(s).role for s in specs].index("scores")]
        attrs["max_keypoints"] = int(kp.type.static_shape[-1])
        attrs["threshold"] = float("-inf")

        def kept(y: int, x: int) -> bool:
            return first(trial, specs, trial.peaks([(y, x)], 1.0)) == ((x, y), 1.0)

        if fast:
            window, attrs["fill"] = windows.window_and_fill(trial, specs, kept, attrs["max_keypoints"])
        else:
            window = windows.window(trial, kept)
            attrs["fill"] = windows.fill(trial, specs, window)
    else:
        # the window's pixels are asked about in the threshold's first run (fast)
        attrs["threshold"], window_kept = threshold(trial, specs, fast,
                                                    windows.window_points(trial) if fast else None)

        def kept(y: int, x: int) -> bool:
            return kept_beside_anchor(trial, specs, y, x, 1.0)

        if window_kept is not None:
            window = windows.window(trial, lambda y, x: (y, x) in window_kept)
        else:
            window = windows.window(trial, windows.asked_at_once(trial, specs, kept, None) if fast else kept)
        attrs.update(max_keypoints=-1, fill=0.0)
    attrs.update(border=window[0], limit_y=window[1], limit_x=window[2])
    selection = agreement.selection(trial, attrs)
    if not fixed:
        attrs["max_keypoints"] = agreement.max_keypoints(trial, specs, attrs, selection[0], selection[2])
    found(f"threshold {attrs['threshold']:g}, max keypoints {attrs['max_keypoints']}, border {window[0]}, "
          f"window {window[1]}x{window[2]}, fill {attrs['fill']:g}")
    why = agreement.agrees(trial, attrs, selection)
    if why:
        raise NoMatch(why)
    return score, desc, outputs, attrs
