"""The engine the paper packages build on: training (the step and chunk, optimizers, the host
loop), sweeps, records, config validation and memory, host set-up, backend, precision, gradient
flow, protocols and plotting. It imports no probe and no paper (docs/architecture.md)."""
