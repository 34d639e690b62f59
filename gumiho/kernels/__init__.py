"""CPU kernels and what the CPU can do: pre-packed float32/bfloat16 linear layers
(cpulinear), 4-bit drafter products (int4linear) and the CPU's features (machine)."""
