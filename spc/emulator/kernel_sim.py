"""Run the TT-Lang kernels in tt-lang-sim against their references, bit for bit.

    .venv/bin/python -m spc.emulator.kernel_sim [--json]

Inputs: random maps quantised to 16 levels (many ties, negative values and -0.0 included), a
natural image's grey levels as a score map, and the NMS chain's own intermediates on it (0/1
masks, window maxima); sizes 64x96 and 120x160 (not a whole number of tiles: the kernels see
zero-padded tiles, and the 9x9 maximum sees the border); top-K positions at 480x640 and 120x160
for keypoint_corners. Each kernel on each input must equal its reference (kernels/nms.py,
kernels/keypoints.py; torch.nn.functional.max_pool2d for the window maximum) bit for bit.

Runs in its own process: importing the simulator rebinds torch.bfloat16 to torch.float32 for the
whole process (tt-lang-sim's ttnnsim.py), which must not leak into spc's emulator.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
from PIL import Image
from skimage import data


def _natural(h: int, w: int, torch: Any) -> Any:
    grey = np.asarray(Image.fromarray(data.camera()).resize((w, h)), np.float32) / 255.0
    return torch.from_numpy(grey)


def _cases(torch: Any, bf16: Any) -> list[tuple[str, dict[str, Any]]]:
    """Named input sets: each a dict of [H, W] float tensors, values exact in bfloat16."""
    # torch and what imports it only after run()'s setup_simulator_imports, which rebinds its names
    import torch.nn.functional as F

    from spc.kernels.nms import suppress

    def window_max(x: Any) -> Any:
        return F.max_pool2d(x[None, None], 9, 1, 4)[0, 0]

    out = []
    for h, w in ((64, 96), (120, 160)):
        g = torch.Generator().manual_seed(h * w)
        ties = (torch.randint(0, 16, (h, w), generator=g).to(torch.float32) / 4.0 - 2.0).to(bf16).float()
        natural = _natural(h, w, torch).to(bf16).float()
        for name, s in ((f"random {h}x{w}", ties), (f"natural {h}x{w}", natural)):
            m = window_max(s)
            mask = (s == m).float()
            near = window_max(mask)
            rest = suppress(s, near)
            rmax = window_max(rest)
            out.append((name, {"s": s, "m": m, "mask": mask, "near": near, "rest": rest, "rmax": rmax}))
    return out


def _bits_equal(a: Any, b: Any, torch: Any) -> bool:
    a, b = a.contiguous().to(torch.float32), b.contiguous().to(torch.float32)
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def _show_violations() -> None:
    """tt-lang-sim 1.1.6 reports a kernel's unsupported patterns through a module its wheel lacks
    (ttl/ttl/diagnostics.py), hiding them behind a FileNotFoundError: print them plainly."""
    import ttl.sim.program as program  # the simulator is optional: only this command imports it

    program.print_diagnostic_error = lambda func, message, path, line, col: print(
        f"{path}:{line}: {func}: {message}", file=sys.stderr)


def run() -> list[dict[str, Any]]:
    _show_violations()
    from ttl.sim.ttlang_sim import setup_simulator_imports  # optional, as above

    setup_simulator_imports()
    import torch  # after the simulator's set-up, as every torch import of this module
    import ttnn  # the simulator's

    from spc.kernels import KERNELS, nms_ttl  # torch: after the simulator's set-up

    torch.set_num_threads(1)  # the simulator's small matmuls are slower with BLAS threads here
    bf16, tile = ttnn.bfloat16, ttnn.TILE_LAYOUT

    def device(x: Any) -> Any:
        return ttnn.from_torch(x.clone(), dtype=bf16, layout=tile)

    results = []
    for case, t in _cases(torch, bf16):
        h, w = t["s"].shape
        arguments = {"nms_select": ("s", "m"), "nms_suppress": ("s", "near"),
                     "nms_admit": ("mask", "rest", "rmax", "near")}
        for name, (body, arity) in nms_ttl.BODIES.items():
            ins = [t[k] for k in arguments[name]]
            out = device(torch.zeros(h, w))
            t0 = time.perf_counter()
            nms_ttl.elementwise(body, arity, h, w)(*[device(x) for x in ins], out)
            got = ttnn.to_torch(out)[:h, :w]
            want = KERNELS[name].reference(*ins)
            results.append({"kernel": name, "input": case, "exact": _bits_equal(got, want, torch),
                            "seconds": time.perf_counter() - t0})
        # the 9x9 window maximum fused with the select, on the map inside a sentinel border
        s = t["s"]
        ht, wt = -(-h // nms_ttl.TILE), -(-w // nms_ttl.TILE)
        sentinel = float(torch.finfo(bf16).min)
        padded = torch.full(((ht + 2) * nms_ttl.TILE, (wt + 2) * nms_ttl.TILE), sentinel)
        padded[nms_ttl.TILE:nms_ttl.TILE + h, nms_ttl.TILE:nms_ttl.TILE + w] = s
        ph, pv = nms_ttl.shift_matrices(torch)
        m_out, o_out = device(torch.zeros(h, w)), device(torch.zeros(h, w))
        t0 = time.perf_counter()
        nms_ttl.window_max_select(h, w)(device(padded), device(s), device(ph), device(pv), m_out, o_out)
        seconds = time.perf_counter() - t0
        wmax = torch.nn.functional.max_pool2d(s[None, None], 9, 1, 4)[0, 0]
        exact = _bits_equal(ttnn.to_torch(m_out)[:h, :w], wmax, torch) and \
            _bits_equal(ttnn.to_torch(o_out)[:h, :w], KERNELS["nms_select"].reference(s, wmax), torch)
        results.append({"kernel": "window_max_select", "input": case, "exact": exact, "seconds": seconds})
    results += _corners(torch, ttnn)
    results += _blend(torch, ttnn)
    return results


def _blend(torch: Any, ttnn: Any) -> list[dict[str, Any]]:
    """descriptor_blend on four gathered descriptor sets: random ones (bfloat16) and the rows of a
    natural image's 8x8 patches, L2-normalised as the descriptor map is; weights as a bilinear
    sample gives them. bfloat16 stored natively here (the simulator otherwise keeps float32)."""
    from spc.emulator.numerics import round_bf16  # bit arithmetic: unaffected by the rebinding
    from spc.kernels import KERNELS, keypoints_ttl  # torch: after the simulator's set-up

    ttnn.set_disable_float32_promotion(True)
    out = []
    g = torch.Generator().manual_seed(7)
    grey = _natural(64, 256, torch)
    patches = grey.reshape(8, 8, 32, 8).permute(0, 2, 1, 3).reshape(256, 64).repeat(1, 4)
    patches = patches / patches.norm(dim=1, keepdim=True).clamp(min=1e-6)
    for name, k in (("random K=64", 64), ("natural K=256", 256)):
        if name.startswith("random"):
            gs = [torch.randn(1, k, 256, generator=g) / 16 for _ in range(4)]
        else:
            gs = [torch.roll(patches, shifts=i, dims=0)[None] for i in range(4)]
        gs = [round_bf16(x) for x in gs]
        fu, fv = torch.rand(1, k, generator=g), torch.rand(1, k, generator=g)
        ws = [(1 - fv) * (1 - fu), (1 - fv) * fu, fv * (1 - fu), fv * fu]
        result = ttnn.from_torch(torch.zeros(1, k, 256), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
        t0 = time.perf_counter()
        keypoints_ttl.blend_op(k, 256)(*[ttnn.from_torch(x.clone(), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT)
                                         for x in gs],
                                       *[ttnn.from_torch(x.clone(), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT)
                                         for x in ws], result)
        want = round_bf16(KERNELS["descriptor_blend"].reference(*gs, *ws, k=k, c=256))
        got = ttnn.to_torch(result)[:, :k, :256].float()
        out.append({"kernel": "descriptor_blend", "input": name, "exact": _bits_equal(got, want, torch),
                    "seconds": time.perf_counter() - t0})
    ttnn.set_disable_float32_promotion(False)
    return out


def _corners(torch: Any, ttnn: Any) -> list[dict[str, Any]]:
    """keypoint_corners on positions of a 472x632 window (480x640 minus a 4-pixel border) and of
    a 112x152 one: every 16th run of K = 2048 consecutive positions (ttnn.topk's largest K), so
    every column and many rows, float32."""
    from spc.kernels import KERNELS, keypoints_ttl  # torch: after the simulator's set-up

    out = []
    for h, w, b in ((480, 640, 4), (120, 160, 4)):
        inner, hc, wc = w - 2 * b, h // 8, w // 8
        q = {"inner": inner, "border": b, "wc": wc, "hc": hc, "half_cell": 3.5,
             "sx": (wc - 1) / (wc * 8 - 4.5), "sy": (hc - 1) / (hc * 8 - 4.5)}
        every = torch.arange((h - 2 * b) * inner, dtype=torch.float32)
        exact, t0 = True, time.perf_counter()
        for start in range(0, len(every), 2048 * 16):
            p = every[start:start + 2048][None]
            k = p.shape[1]
            outs = [ttnn.from_torch(torch.zeros(1, k), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT) for _ in range(8)]
            keypoints_ttl.corners_op(k, q)(ttnn.from_torch(p.clone(), dtype=ttnn.float32, layout=ttnn.TILE_LAYOUT),
                                            *outs)
            want = KERNELS["keypoint_corners"].reference(p, **q)
            exact &= all(_bits_equal(ttnn.to_torch(o)[:1, :k], r, torch) for o, r in zip(outs, want))
        out.append({"kernel": "keypoint_corners", "input": f"positions {h}x{w}", "exact": bool(exact),
                    "seconds": time.perf_counter() - t0})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = run()
    if args.json:
        print(json.dumps(results))
    else:
        for r in results:
            print(f"{r['kernel']:18} {r['input']:18} {'exact' if r['exact'] else 'MISMATCH':9} {r['seconds']:.3f} s")
    return 0 if all(r["exact"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
