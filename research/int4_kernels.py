"""PyTorch's own weight-only 4-bit kernel against the packed float32 product, on the
default target's shapes (SmolLM2-135M: 30 layers of q, k, v, o, gate, up, down), for
1..16 rows: the measurement behind choosing llama.cpp, not torch's int4 kernel, as the
4-bit runtime (docs/llamacpp.md); and torch's weight-only int8 kernel (one scale per
output row), the other PyTorch candidate for a flatter verify curve (gumiho.bench.layouts).

    python research/int4_kernels.py

Thirty layers of distinct weights, so that, as in a real forward, each weight comes
from memory rather than a cache. torch's CPU int4 kernel takes group size 32 (GGUF
Q4_1's block) with one scale and zero per group; it is vectorised only for bfloat16
activations here (float32 and float16 activations take a path tens of times slower),
so its rows are also rounded to bfloat16: a cost in exactness before any speed.
Weights are random: the speed of a product does not depend on the values."""
import time

import torch

LAYER = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]


def median_ms(fn, n=10):
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[n // 2] * 1e3


def main():
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    f32, i4, i8 = [], [], []
    for _ in range(30):
        for n, k in LAYER:
            f32.append((torch.ops.mkldnn._reorder_linear_weight(torch.randn(n, k, generator=g), 16), k))
            i8.append((torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=g), torch.rand(n, generator=g)))
            q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=g)
            i4.append((torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1),
                       torch.randn(k // 32, n, 2, generator=g).bfloat16(), k))
    print("rows | float32 packed (ms, 30 layers) | int4, bfloat16 activations (ms) | int4 / float32 | "
          "int8 weight-only, float32 activations (ms) | int8 / float32")
    for m in (1, 2, 4, 8, 16):
        xf = {k: torch.randn(m, k, generator=g) for k in (576, 1536)}
        xb = {k: v.bfloat16() for k, v in xf.items()}
        a = median_ms(lambda: [torch.ops.mkldnn._linear_pointwise(xf[k], w, None, "none", [], "") for w, k in f32])
        b = median_ms(lambda: [torch.ops.aten._weight_int4pack_mm_for_cpu(xb[k], w, 32, sz) for w, sz, k in i4])
        c = median_ms(lambda: [torch._weight_int8pack_mm(xf[w.shape[1]], w, sc) for w, sc in i8])
        print(f"{m:4d} | {a:8.2f} | {b:8.2f} | {b / a:.2f} | {c:8.2f} | {c / a:.2f}")


if __name__ == "__main__":
    main()
