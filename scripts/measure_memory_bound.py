#!/usr/bin/env python3
"""Time PyTorch's memory-bound kernels at training sizes on one GPU, as bytes per second.

    python3 scripts/measure_memory_bound.py [--out memory_bound.jsonl] [--dtype bf16]
        [--reps 20] [--kernels aten|compiled|all]

The cost model prices a memory-bound op as its bytes over memory_bandwidth ·
memory_peak_fraction plus one launch (sim/cost_model.hpp, rule 1), with the fraction
measured on GB-scale copies (topology/README.md). A training step's elementwise kernels are
smaller and do more per byte (Philox for dropout, reductions for layer norm and softmax);
this script measures what they reach. Each case runs one ATen kernel, forward or backward,
on tensors of a Megatron layer's shapes (activations of sequence × micro batch rows of the
hidden size or four times it; attention scores of micro batch · heads × sequence ×
sequence), times `--reps` launches with CUDA events after warm-up, and divides the bytes the
kernel must move (counted below, per element of the dtype) by the time. A 1 GiB copy gives
the reference bandwidth the others are printed against. `--kernels compiled` (or `all`, the
default) adds Megatron-Core's fused elementwise ops (bias-GeLU and its backward,
bias-dropout-add, SwiGLU) and the two norms as torch.compile builds them, which is how
Megatron-Core's jit_fuser runs its fusions.

One JSON line per case: op, shape, dtype, bytes, seconds per launch, GB/s, and the fraction
of the 1 GiB copy's bandwidth. Needs PyTorch with a CUDA GPU (not a dependency of tandem):
tests/gpu/run.sh runs it when python3 has torch.
"""
import argparse
import sys

import torch

from gpu_measure import timed, write_lines

# Bytes each kernel moves, in elements of the dtype's size `e` (a bool mask is 1 byte).
# add: read a and b, write c. copy: read, write. gelu: read, write; its backward reads the
# gradient and the input, writes one. dropout: read, write, write the bool mask; its
# backward reads the gradient and the mask, writes one. layer_norm: read, write (the fp32
# mean and rstd per row are small); its backward reads dy and x, writes dx (the weight and
# bias gradients' partial sums are small). softmax: read, write; its backward reads y and
# dy, writes dx. masked_fill_: read and write in place (the mask broadcasts, small).
BYTES = {
    "add": lambda n, e: 3 * n * e,
    "copy": lambda n, e: 2 * n * e,
    "gelu": lambda n, e: 2 * n * e,
    "gelu_backward": lambda n, e: 3 * n * e,
    "dropout": lambda n, e: 2 * n * e + n,
    "dropout_backward": lambda n, e: 2 * n * e + n,
    "layer_norm": lambda n, e: 2 * n * e,
    "layer_norm_backward": lambda n, e: 3 * n * e,
    "softmax": lambda n, e: 2 * n * e,
    "softmax_backward": lambda n, e: 3 * n * e,
    "masked_fill": lambda n, e: 2 * n * e,
    # Megatron-Core's fused elementwise ops as its jit_fuser (torch.compile) builds them.
    # bias_gelu: read y, write (the bias is small); its backward reads the gradient and y.
    # bias_dropout_add (forward only, no mask kept): read x and the residual, write.
    # swiglu: read the 2·h-wide input (n elements), write half. The norms: read, write.
    "compiled_bias_gelu": lambda n, e: 2 * n * e,
    "compiled_bias_gelu_backward": lambda n, e: 3 * n * e,
    "compiled_bias_dropout_add": lambda n, e: 3 * n * e,
    "compiled_swiglu": lambda n, e: 1.5 * n * e,
    "compiled_layer_norm": lambda n, e: 2 * n * e,
    "compiled_rms_norm": lambda n, e: 2 * n * e,
}




def cases(dtype):
    """(op, shape, callable) for every op at each shape it meets in a layer."""
    aten = torch.ops.aten
    dev = "cuda"
    out = []
    # Activations: rows = sequence × micro batch, columns = hidden or 4 · hidden.
    for rows, cols in ((4096, 2048), (8192, 4096), (8192, 16384), (16384, 12288)):
        x = torch.randn(rows, cols, device=dev, dtype=dtype)
        y = torch.randn_like(x)
        w = torch.ones(cols, device=dev, dtype=dtype)
        b = torch.zeros(cols, device=dev, dtype=dtype)
        shape = [rows, cols]
        out.append(("add", shape, lambda x=x, y=y: torch.add(x, y)))
        out.append(("copy", shape, lambda x=x: x.clone()))
        out.append(("gelu", shape, lambda x=x: aten.gelu(x)))
        out.append(("gelu_backward", shape, lambda x=x, y=y: aten.gelu_backward(y, x)))
        _, mask = aten.native_dropout(x, 0.1, True)
        out.append(("dropout", shape, lambda x=x: aten.native_dropout(x, 0.1, True)))
        out.append(("dropout_backward", shape,
                    lambda y=y, mask=mask: aten.native_dropout_backward(y, mask, 1 / 0.9)))
        _, mean, rstd = aten.native_layer_norm(x, [cols], w, b, 1e-5)
        out.append(("layer_norm", shape,
                    lambda x=x, w=w, b=b, cols=cols: aten.native_layer_norm(x, [cols], w, b, 1e-5)))
        out.append(("layer_norm_backward", shape,
                    lambda x=x, y=y, w=w, b=b, mean=mean, rstd=rstd, cols=cols:
                    aten.native_layer_norm_backward(y, x, [cols], mean, rstd, w, b,
                                                    [True, True, True])))
    # Attention scores: (micro batch · heads per rank, sequence, sequence).
    for batch_heads, seq in ((32, 1024), (128, 1024), (16, 4096)):
        s = torch.randn(batch_heads, seq, seq, device=dev, dtype=dtype)
        g = torch.randn_like(s)
        causal = torch.ones(seq, seq, device=dev, dtype=torch.bool).triu(1)
        p = aten._softmax(s, -1, False)
        shape = [batch_heads, seq, seq]
        out.append(("softmax", shape, lambda s=s: aten._softmax(s, -1, False)))
        out.append(("softmax_backward", shape,
                    lambda g=g, p=p: aten._softmax_backward_data(g, p, -1, dtype)))
        out.append(("masked_fill", shape, lambda s=s, causal=causal: s.masked_fill_(causal, -1e4)))
        _, mask = aten.native_dropout(p, 0.1, True)
        out.append(("dropout", shape, lambda p=p: aten.native_dropout(p, 0.1, True)))
        out.append(("dropout_backward", shape,
                    lambda g=g, mask=mask: aten.native_dropout_backward(g, mask, 1 / 0.9)))
    return out


def bias_gelu(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def bias_gelu_backward(g, bias, y):
    x = bias + y
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (
        1 + tanh_out)
    return ff * g


def bias_dropout_add(x, bias, residual):
    return residual + torch.nn.functional.dropout(x + bias, p=0.1, training=True)


def swiglu(y):
    y_1, y_2 = torch.chunk(y, 2, -1)
    return torch.nn.functional.silu(y_1) * y_2


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w


def compiled_cases(dtype):
    """Megatron-Core's fused elementwise ops (megatron/core/fusions) through torch.compile,
    as its jit_fuser runs them on PyTorch 2.2 and later, at one layer's shapes (hidden
    4096, 8192 tokens: micro batch 2 of sequence 4096)."""
    dev, rows, hidden = "cuda", 8192, 4096
    x = torch.randn(rows, hidden, device=dev, dtype=dtype)
    r = torch.randn_like(x)
    b = torch.zeros(hidden, device=dev, dtype=dtype)
    w = torch.ones(hidden, device=dev, dtype=dtype)
    y4 = torch.randn(rows, 4 * hidden, device=dev, dtype=dtype)
    g4 = torch.randn_like(y4)
    b4 = torch.zeros(4 * hidden, device=dev, dtype=dtype)
    c = torch.compile
    gelu_f, gelu_b, bda = c(bias_gelu), c(bias_gelu_backward), c(bias_dropout_add)
    glu, ln, rms = c(swiglu), c(torch.nn.functional.layer_norm), c(rms_norm)
    return [
        ("compiled_bias_gelu", [rows, 4 * hidden], lambda: gelu_f(b4, y4)),
        ("compiled_bias_gelu_backward", [rows, 4 * hidden], lambda: gelu_b(g4, b4, y4)),
        ("compiled_bias_dropout_add", [rows, hidden], lambda: bda(x, b, r)),
        ("compiled_swiglu", [rows, 4 * hidden], lambda: glu(y4)),
        ("compiled_layer_norm", [rows, hidden], lambda: ln(x, (hidden,), w, b, 1e-5)),
        ("compiled_rms_norm", [rows, hidden], lambda: rms(x, w)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the JSON lines here too")
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--kernels", choices=("aten", "compiled", "all"), default="all",
                        help="ATen's kernels, Megatron's fused ops through torch.compile, or both")
    args = parser.parse_args()
    if args.reps < 1:
        sys.exit(f"measure_memory_bound.py: --reps = {args.reps}: must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("measure_memory_bound.py: needs a CUDA GPU")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    big = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    copy_gbs = 2 * big.numel() / timed(big.clone, args.reps)[0] / 1e9
    del big
    lines = [{"op": "copy_1GiB", "gpu": torch.cuda.get_device_name(), "GB/s": copy_gbs}]
    print(f"{torch.cuda.get_device_name()}: 1 GiB copy {copy_gbs:.0f} GB/s (read + write)")
    chosen = (cases(dtype) if args.kernels != "compiled" else []) + (
        compiled_cases(dtype) if args.kernels != "aten" else [])
    for op, shape, fn in chosen:
        n = 1
        for d in shape:
            n *= d
        nbytes = BYTES[op](n, elem)
        try:
            seconds, host_bound = timed(fn, args.reps)
        except Exception as e:  # a compile that fails is reported, and the rest still run
            print(f"  {op}: {str(e).splitlines()[0][:200]}", flush=True)
            continue
        gbs = nbytes / seconds / 1e9
        lines.append({"op": op, "shape": shape, "dtype": args.dtype, "bytes": nbytes,
                      "seconds": seconds, "GB/s": gbs, "of_copy": gbs / copy_gbs,
                      "host_bound": host_bound})
        print(f"  {op:20s} {str(shape):22s} {nbytes / 1e6:9.1f} MB {seconds * 1e6:9.1f} us "
              f"{gbs:7.0f} GB/s  {gbs / copy_gbs:5.2f} of the copy's")
    write_lines(args.out, lines)


if __name__ == "__main__":
    main()
