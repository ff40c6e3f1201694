"""Triton code generation for GPUs: the same IR and scheduler as the C++ side, another printer.

    from inductor_codegen import compile_graph
    compiled = compile_graph(gm, cuda_inputs)                       # Triton for CUDA inputs
    compiled = compile_graph(gm, cpu_inputs, options={"device_codegen": "triton"})
                                                   # CPU tensors, under TRITON_INTERPRET=1
    compiled = compile_graph(gm, cuda_inputs, options={"cudagraphs": True, "max_autotune": True})

Importing this package does not import triton; compiling a graph does.

What is generated: one `@triton.jit` kernel per fused kernel of the shared
scheduler. Pointwise kernels are 1D blocks over the flattened loop nest, or
2D tiles (XBLOCK x YBLOCK) when an access runs across the last dimension (a
transpose). Reductions are persistent (one block per row, rows up to 4096)
or looped; var/mean use Welford in loops and two passes over the block when
persistent. Ragged edges are masked; bfloat16/float16 compute in float32;
`rand`, `bernoulli.p` and `native_dropout` draw Philox numbers (`tl.rand`)
in the kernel from a per-call seed. Matmul and convolution stay ATen calls.

Launch configurations come from sizes (`default_config`); `max_autotune`
measures `autotune_configs` on the first call, printing progress to stderr,
and keeps the winner in `<cache>/triton/autotune/*.json`. Kernel modules live
in `<cache>/triton/kernels/` (named by content hash) and compile in parallel
through Triton's async compile mode before the first call. After its first
launch a kernel is launched through the compiled binary's launcher
(`runtime.Launcher`), skipping Triton's per-call argument binding.

Under `max_autotune`, mm/addmm/bmm become Triton matmul templates generated
for their sizes, with the pointwise kernel that reads the product fused into
the template's store (`templates`); the first call times a few block
configurations against the ATen call plus the separate epilogue kernel and
keeps the faster (`template_runtime`, cached on disk; option
`matmul_templates` forces either way). The Triton lowering table also runs
16-bit convolutions channels-last (`layouts`), pads 16-bit matmuls whose
rows are not 16-byte aligned (`padding`: a 50257-word vocabulary), and hands
fused attention calls their traced strides (`strides`).

CUDA graphs (`cudagraphs=True`, mode "reduce-overhead"; `cudagraph_compiler`
for the `cudagraphs` backend): one recording per input signature in a shared
memory pool. Inputs whose address changes are copied into static buffers;
outputs live in static memory and are overwritten by the next replay, so
clone what you keep (see `cudagraphs`).
"""
